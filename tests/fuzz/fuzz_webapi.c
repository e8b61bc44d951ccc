/* libFuzzer harness: the web API's parameters (controld/ctl_webapi.c): any JSON a browser, or
 * another team reaching the listener, sends to /api/cmd/PATH, through fgexctl's own request
 * builders; then the reply rendering with whatever reply bytes follow. Input: one byte picks the
 * command, two bytes (little-endian) give the JSON's length, then the JSON, then the reply.
 * Checks: a request that builds is a Request that unpacks; a refusal is a 400 with a reason. */
#include <assert.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "control.pb-c.h"
#include "controld/ctl_webapi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static size_t ncmds;
    const struct ctl_webapi_cmd *c;
    json_t *params, *err = NULL;
    void *req = NULL, *body = NULL;
    size_t reqlen = 0, bodylen = 0, jlen;
    const char *ctype = NULL;
    char *disp = NULL;
    int status = 0;

    if (ncmds == 0)
        while (ctl_webapi_at(ncmds) != NULL)
            ncmds++;
    if (size < 3 || ncmds == 0)
        return 0;
    c = ctl_webapi_at(data[0] % ncmds);
    jlen = (size_t)(data[1] | data[2] << 8);
    if (jlen > size - 3)
        jlen = size - 3;
    params = json_loadb((const char *)data + 3, jlen, JSON_DECODE_ANY, NULL);
    if (params == NULL)
        return 0;
    if (ctl_webapi_request(c, params, "token", &req, &reqlen, &status, &err) == 0) {
        Fgx__Ctl__Request *q = fgx__ctl__request__unpack(NULL, reqlen, req);

        assert(q != NULL);
        fgx__ctl__request__free_unpacked(q, NULL);
        if (ctl_webapi_reply(c, req, reqlen, data + 3 + jlen, size - 3 - jlen, &status, &ctype,
                             &body, &bodylen, &disp) == 0) {
            assert(status >= 200 && status < 600 && ctype != NULL);
            free(body);
            free(disp);
        }
        free(req);
    } else {
        assert(status == 400 && err != NULL && json_object_get(err, "error") != NULL);
        json_decref(err);
    }
    json_decref(params);
    return 0;
}
