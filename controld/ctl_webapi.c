/* TEMPORARY stand-in for the web API's command library (webcli's controld/ctl_webapi.c replaces
 * it at merge): `status` and `service/list`, a bare `service/add NAME --port P` (tcp), and a
 * minimal live event/stats JSON, so that
 * the web server can be built and tested before the real one lands. */
#include "controld/ctl_webapi.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "control.pb-c.h"

struct ctl_webapi_cmd {
    const char *path;
    Fgx__Ctl__Request__ReqCase req;
    bool read_only;
};

static const struct ctl_webapi_cmd stub_cmds[] = {
    {"status", FGX__CTL__REQUEST__REQ_STATUS, true},
    {"service/list", FGX__CTL__REQUEST__REQ_SERVICE_LIST, true},
    {"service/add", FGX__CTL__REQUEST__REQ_SERVICE_ADD, false},
};

const struct ctl_webapi_cmd *ctl_webapi_find(const char *path)
{
    for (size_t i = 0; i < sizeof(stub_cmds) / sizeof(stub_cmds[0]); i++)
        if (strcmp(stub_cmds[i].path, path) == 0)
            return &stub_cmds[i];
    return NULL;
}

bool ctl_webapi_read_only(const struct ctl_webapi_cmd *c)
{
    return c->read_only;
}

const char *ctl_webapi_changes(const struct ctl_webapi_cmd *c)
{
    return c->read_only ? NULL : "services";
}

int ctl_webapi_request(const struct ctl_webapi_cmd *c, const json_t *params, const char *token,
                       void **req, size_t *reqlen, int *status, json_t **err)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Empty e = FGX__CTL__EMPTY__INIT;
    Fgx__Ctl__ServiceAdd a = FGX__CTL__SERVICE_ADD__INIT;
    const json_t *name = json_object_get(params, "name");
    const json_t *port = json_object_get(params, "port");

    q.token = (char *)token;
    q.req_case = c->req;
    if (c->req == FGX__CTL__REQUEST__REQ_STATUS) {
        q.status = &e;
    } else if (c->req == FGX__CTL__REQUEST__REQ_SERVICE_LIST) {
        q.service_list = &e;
    } else {
        if (!json_is_string(name) || !json_is_integer(port)) {
            *status = 400;
            *err = json_pack("{s:s, s:i}", "error", "service add takes name and port", "exit", 2);
            return -EINVAL;
        }
        a.name = (char *)json_string_value(name);
        a.proto = FGX__CTL__PROTO__PROTO_TCP;
        a.port = (uint32_t)json_integer_value(port);
        q.service_add = &a;
    }
    *reqlen = fgx__ctl__request__get_packed_size(&q);
    *req = malloc(*reqlen ? *reqlen : 1);
    if (!*req)
        return -ENOMEM;
    fgx__ctl__request__pack(&q, *req);
    return 0;
}

static int code_status(Fgx__Ctl__Code code, int *exitc)
{
    switch (code) {
    case FGX__CTL__CODE__CODE_OK:
        *exitc = 0;
        return 200;
    case FGX__CTL__CODE__CODE_AUTH:
        *exitc = 7;
        return 401;
    case FGX__CTL__CODE__CODE_INVALID:
    case FGX__CTL__CODE__CODE_EXISTS:
        *exitc = code == FGX__CTL__CODE__CODE_INVALID ? 2 : 4;
        return 400;
    case FGX__CTL__CODE__CODE_NOT_FOUND:
        *exitc = 3;
        return 404;
    default:
        *exitc = 1;
        return 500;
    }
}

int ctl_webapi_reply(const struct ctl_webapi_cmd *c, const void *req, size_t reqlen,
                     const void *rep, size_t replen, int *status, const char **ctype,
                     void **body, size_t *bodylen, char **disposition)
{
    Fgx__Ctl__Reply *r = fgx__ctl__reply__unpack(NULL, replen, rep);
    json_t *o = NULL;
    int exitc = 1;

    (void)req;
    (void)reqlen;
    *ctype = "application/json";
    *disposition = NULL;
    if (!r) {
        *status = 500;
        o = json_pack("{s:s, s:i}", "error", "controld sent an unreadable reply", "exit", 1);
    } else if (r->code != FGX__CTL__CODE__CODE_OK) {
        *status = code_status(r->code, &exitc);
        o = json_pack("{s:s, s:i}", "error", r->error ? r->error : "error", "exit", exitc);
    } else if (c->req == FGX__CTL__REQUEST__REQ_SERVICE_ADD) {
        *status = 200;
        o = r->n_services ? json_pack("{s:I, s:s}", "id", (json_int_t)r->services[0]->id, "name",
                                      r->services[0]->name)
                          : json_null();
    } else if (c->req == FGX__CTL__REQUEST__REQ_STATUS) {
        *status = 200;
        o = r->status ? json_pack("{s:s, s:I, s:I, s:I}", "version", r->status->version, "uptime",
                                  (json_int_t)r->status->uptime, "services",
                                  (json_int_t)r->status->services, "services_active",
                                  (json_int_t)r->status->services_active)
                      : json_null();
    } else {
        *status = 200;
        o = json_array();
        for (size_t i = 0; o && i < r->n_services; i++)
            json_array_append_new(o, json_pack("{s:I, s:s, s:I}", "id",
                                               (json_int_t)r->services[i]->id, "name",
                                               r->services[i]->name, "port",
                                               (json_int_t)r->services[i]->port));
    }
    if (r)
        fgx__ctl__reply__free_unpacked(r, NULL);
    if (!o)
        return -ENOMEM;
    *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!*body)
        return -ENOMEM;
    *bodylen = strlen(*body);
    return 0;
}

json_t *ctl_webapi_event_json(const void *event)
{
    const Fgx__Ctl__Event *e = event;

    return json_pack("{s:I, s:I, s:s?, s:I, s:s, s:I, s:s, s:I}", "seq", (json_int_t)e->seq,
                     "service_id", (json_int_t)e->service_id, "service", e->service, "filter_id",
                     (json_int_t)e->filter_id, "src", e->src, "sport", (json_int_t)e->sport,
                     "dst", e->dst, "dport", (json_int_t)e->dport);
}

json_t *ctl_webapi_stats_json(const void *rep, size_t replen)
{
    Fgx__Ctl__Reply *r = fgx__ctl__reply__unpack(NULL, replen, rep);
    json_t *a = json_array();

    for (size_t i = 0; r && a && i < r->n_service_stats; i++) {
        const Fgx__Ctl__ServiceStats *s = r->service_stats[i];

        json_array_append_new(a, json_pack("{s:s, s:I, s:I}", "name", s->name, "packets",
                                           (json_int_t)s->packets, "blocked",
                                           (json_int_t)s->blocked));
    }
    if (r)
        fgx__ctl__reply__free_unpacked(r, NULL);
    return a;
}

json_t *ctl_webapi_script_log_json(const void *entry)
{
    const Fgx__Ctl__ScriptLogEntry *e = entry;

    return json_pack("{s:I, s:s?}", "seq", (json_int_t)e->seq, "text", e->text);
}
