/* fgexctl local stage: files and terminal around the one request (cli_local.h). Everything the
 * request needs is read and checked first, so a malformed file is refused with its position and
 * nothing reaches controld; what the reply brings back (a token, a configuration) is written
 * atomically with mode 0600. */
#include "cli_local.h"

#include "cmd.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_config.h"
#include "cli_fmt.h"
#include "cli_json.h"
#include "cli_pin.h"
#include "cli_ruleset.h"
#include "cli_session.h"
#include "cmd_fw.h"

static int lfail(struct cli_local *l, int code, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int lfail(struct cli_local *l, int code, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(l->err, sizeof(l->err), fmt, ap);
    va_end(ap);
    l->exit_code = code;
    return rc;
}

/* FILE, or stdin for "-" (or what the web API handed over: cli_args_read_file). */
static int read_input(const struct cli_cmd *cmd, struct cli_local *l, const char *file,
                      char **text, size_t *len)
{
    int rc = cli_args_read_file(cmd, file, CLI_IMPORT_MAX, text, len);

    if (rc < 0)
        return lfail(l, CLI_EXIT_ERROR, rc, "cannot read %s: %s", file,
                     rc == -EFBIG ? "larger than 64 MiB" : strerror(-rc));
    return 0;
}

int cli_local_prepare(struct cli_cmd *cmd, struct cli_local *l)
{
    char *text = NULL, why[512];
    size_t len;
    int rc = 0;

    memset(l, 0, sizeof(*l));
    switch (cmd->req.req_case) {
    case FGX__CTL__REQUEST__REQ_LOGIN:
    case FGX__CTL__REQUEST__REQ_PASSWD: {
        bool passwd = cmd->req.req_case == FGX__CTL__REQUEST__REQ_PASSWD;

        if (cmd->in_memory) {
            /* No terminal and no stdin to ask: the password is the blob's first line. */
            rc = cli_args_read_file(cmd, cmd->password_file ? cmd->password_file : "", CLI_PASSWORD_MAX,
                                    &l->password, &len);
            if (rc < 0)
                return lfail(l, CLI_EXIT_USAGE, rc, "%s: %s", passwd ? "passwd" : "login",
                             rc == -EFBIG ? "the password is too long"
                                          : "give the password (password_file)");
            l->password[strcspn(l->password, "\r\n")] = '\0';
            if (passwd)
                cmd->m.passwd.password = l->password;
            else
                cmd->m.login.password = l->password;
            return 0;
        }
        rc = cli_password_read(cmd->password_file, passwd, &l->password, why, sizeof(why));
        if (rc < 0)
            return lfail(l, rc == -EINVAL ? CLI_EXIT_INVALID : CLI_EXIT_ERROR, rc, "%s: %s",
                         passwd ? "passwd" : "login", why);
        if (passwd)
            cmd->m.passwd.password = l->password;
        else
            cmd->m.login.password = l->password;
        return 0;
    }
    case FGX__CTL__REQUEST__REQ_CONFIG_IMPORT:
        if (!cmd->file)
            return 0; /* reset: the empty configuration it built (cmd_admin.c) */
        rc = read_input(cmd, l, cmd->file, &text, &len);
        if (rc < 0)
            return rc;
        rc = cli_config_read(text, len, &l->config, why, sizeof(why));
        free(text);
        if (rc < 0)
            return lfail(l, rc == -EINVAL ? CLI_EXIT_INVALID : CLI_EXIT_ERROR, rc,
                         "import: %s: %s; nothing was changed", cmd->file,
                         rc == -EINVAL ? why : strerror(-rc));
        cmd->req.config_import = l->config;
        return 0;
    case FGX__CTL__REQUEST__REQ_FILTER_IMPORT:
        rc = read_input(cmd, l, cmd->file, &text, &len);
        if (rc < 0)
            return rc;
        rc = cli_ruleset_parse(text, len, &cmd->m.filter_import, why, sizeof(why));
        free(text);
        if (rc < 0)
            return lfail(l, rc == -EINVAL ? CLI_EXIT_INVALID : CLI_EXIT_ERROR, rc,
                         "filter import: %s: %s; nothing was changed", cmd->file,
                         rc == -EINVAL ? why : strerror(-rc));
        l->ruleset = true;
        return 0;
    case FGX__CTL__REQUEST__REQ_FW_IMPORT:
        rc = read_input(cmd, l, cmd->file, &l->fw_text, &len);
        if (rc < 0)
            return rc;
        rc = cli_fw_file_parse(l->fw_text, len, &cmd->m.fw.imp, why, sizeof(why));
        if (rc < 0)
            return lfail(l, rc == -EINVAL ? CLI_EXIT_INVALID : CLI_EXIT_ERROR, rc,
                         "fw import: %s: %s; nothing was changed", cmd->file,
                         rc == -EINVAL ? why : strerror(-rc));
        return 0;
    case FGX__CTL__REQUEST__REQ_SCRIPT_SET:
        rc = read_input(cmd, l, cmd->file, &l->script, &len);
        if (rc < 0)
            return rc;
        cmd->m.script_set.source.data = (uint8_t *)l->script;
        cmd->m.script_set.source.len = len;
        return 0;
    case FGX__CTL__REQUEST__REQ_REGEX_MATCH:
        rc = read_input(cmd, l, cmd->file, &l->script, &len);
        if (rc < 0)
            return rc;
        cmd->m.regex_match.m.sample.data = (uint8_t *)l->script;
        cmd->m.regex_match.m.sample.len = len;
        return 0;
    default:
        return 0;
    }
}

bool cli_local_prints(const struct cli_cmd *cmd)
{
    switch (cmd->req.req_case) {
    case FGX__CTL__REQUEST__REQ_LOGIN:
    case FGX__CTL__REQUEST__REQ_LOGOUT:
    case FGX__CTL__REQUEST__REQ_PASSWD:
    case FGX__CTL__REQUEST__REQ_AUTH_SET:
    case FGX__CTL__REQUEST__REQ_CERT:
    case FGX__CTL__REQUEST__REQ_CONFIG_EXPORT:
    case FGX__CTL__REQUEST__REQ_FILTER_IMPORT:
    case FGX__CTL__REQUEST__REQ_FILTER_EXPORT:
        return true;
    case FGX__CTL__REQUEST__REQ_FW_LIST: /* fw export FILE */
    case FGX__CTL__REQUEST__REQ_CONFIG_IMPORT: /* import FILE; reset prints its own */
        return cmd->file != NULL;
    default:
        return false;
    }
}

void cli_local_auth_failed(const struct cli_cmd *cmd)
{
    char path[4096];

    if (cli_session_find(cmd->url, path, sizeof(path)) == 0)
        (void)cli_session_remove(path);
}

static int finish_login(struct cli_cmd *cmd, struct cli_local *l, const Fgx__Ctl__Reply *rep,
                        FILE *out, json_t **doc)
{
    char path[4096];
    int rc;

    if (!rep->token || !*rep->token)
        return lfail(l, CLI_EXIT_ERROR, -EPROTO, "login: controld sent no session token");
    rc = cli_session_path(cmd->url, path, sizeof(path));
    if (rc == 0)
        rc = cli_session_store(path, rep->token);
    if (rc < 0)
        return lfail(l, CLI_EXIT_ERROR, rc, "login: cannot store the session token: %s",
                     strerror(-rc));
    if (cmd->json) {
        *doc = json_pack("{s:b, s:o, s:o}", "logged_in", true, "url", cli_json_str(cmd->url),
                         "session_file", cli_json_str(path));
    } else {
        (void)fprintf(out, "logged in to %s (session kept in %s)\n", cmd->url, path);
    }
    return 0;
}

static int finish_export(struct cli_cmd *cmd, struct cli_local *l, const Fgx__Ctl__Reply *rep,
                         FILE *out, json_t **jdoc)
{
    char *doc = NULL, why[256];
    size_t len = 0;
    FILE *mf;
    int rc;

    if (!rep->config)
        return lfail(l, CLI_EXIT_ERROR, -EPROTO, "export: controld sent no configuration");
    mf = open_memstream(&doc, &len);
    if (!mf)
        return lfail(l, CLI_EXIT_ERROR, -ENOMEM, "out of memory");
    rc = cli_config_write(mf, rep->config, why, sizeof(why));
    if (fclose(mf) == EOF && rc == 0)
        rc = -ENOMEM;
    if (rc < 0) {
        free(doc);
        return lfail(l, CLI_EXIT_ERROR, rc, "export: %s", rc == -EINVAL ? why : strerror(-rc));
    }
    if (strcmp(cmd->file, "-") == 0) {
        /* The document itself is the output, --json or not. */
        (void)fwrite(doc, 1, len, out);
        free(doc);
        return 0;
    }
    rc = cli_pin_write_file(cmd->file, doc, len);
    free(doc);
    if (rc < 0)
        return lfail(l, CLI_EXIT_ERROR, rc, "export: cannot write %s: %s", cmd->file,
                     strerror(-rc));
    if (cmd->json) {
        *jdoc = json_pack("{s:o, s:I, s:I}", "file", cli_json_str(cmd->file), "services",
                          cli_json_int(rep->config->n_services), "filters",
                          cli_json_int(rep->config->n_filters));
    } else {
        (void)fprintf(out, "exported %zu service%s and %zu filter%s to %s\n",
                      rep->config->n_services, rep->config->n_services == 1 ? "" : "s",
                      rep->config->n_filters, rep->config->n_filters == 1 ? "" : "s", cmd->file);
    }
    return 0;
}

/* fw export FILE: the rule list as a rule file. */
static int finish_fw_export(struct cli_cmd *cmd, struct cli_local *l, const Fgx__Ctl__Reply *rep,
                            FILE *out, json_t **jdoc)
{
    char *doc = NULL;
    size_t len = 0;
    FILE *mf;
    int rc;

    if (!rep->fw)
        return lfail(l, CLI_EXIT_ERROR, -EPROTO, "fw export: controld sent no rules");
    mf = open_memstream(&doc, &len);
    if (!mf)
        return lfail(l, CLI_EXIT_ERROR, -ENOMEM, "out of memory");
    rc = cli_fw_file_write(mf, rep->fw);
    if (fclose(mf) == EOF && rc == 0)
        rc = -ENOMEM;
    if (rc < 0) {
        free(doc);
        return lfail(l, CLI_EXIT_ERROR, rc, "fw export: %s", strerror(-rc));
    }
    if (strcmp(cmd->file, "-") == 0) {
        (void)fwrite(doc, 1, len, out);
        free(doc);
        cmd->json = false; /* the file itself is the output */
        return 0;
    }
    rc = cli_pin_write_file(cmd->file, doc, len);
    free(doc);
    if (rc < 0)
        return lfail(l, CLI_EXIT_ERROR, rc, "fw export: cannot write %s: %s", cmd->file,
                     strerror(-rc));
    if (cmd->json)
        *jdoc = json_pack("{s:o, s:I}", "file", cli_json_str(cmd->file), "rules",
                          cli_json_int(rep->fw->n_rules));
    else
        (void)fprintf(out, "exported %zu firewall rule%s to %s\n", rep->fw->n_rules,
                      rep->fw->n_rules == 1 ? "" : "s", cmd->file);
    return 0;
}

int cli_local_finish(struct cli_cmd *cmd, struct cli_local *l, const Fgx__Ctl__Reply *rep,
                     FILE *out)
{
    json_t *doc = NULL;
    char path[4096], why[256], name[256];
    bool on;
    int rc = 0;

    switch (cmd->req.req_case) {
    case FGX__CTL__REQUEST__REQ_LOGIN:
        rc = finish_login(cmd, l, rep, out, &doc);
        break;
    case FGX__CTL__REQUEST__REQ_LOGOUT:
        if (cli_session_find(cmd->url, path, sizeof(path)) == 0)
            (void)cli_session_remove(path);
        if (cmd->json) {
            doc = json_pack("{s:b}", "logged_out", true);
        } else {
            (void)fputs("logged out\n", out);
        }
        break;
    case FGX__CTL__REQUEST__REQ_PASSWD:
        on = cmd->m.passwd.expire_sessions;
        if (cmd->json) {
            doc = json_pack("{s:b, s:b}", "password_changed", true, "sessions_expired", on);
        } else {
            (void)fprintf(out, "password changed%s\n",
                          on ? "; every other session is logged out" : "");
        }
        break;
    case FGX__CTL__REQUEST__REQ_AUTH_SET:
        on = rep->has_auth_enabled ? rep->auth_enabled : cmd->m.auth_set.enabled;
        if (cmd->json) {
            doc = json_pack("{s:b}", "auth_enabled", on);
        } else {
            (void)fprintf(out, "password %s for remote clients\n",
                          on ? "required" : "NOT required");
        }
        break;
    case FGX__CTL__REQUEST__REQ_CERT:
        if (!rep->fingerprint || !*rep->fingerprint) {
            rc = lfail(l, CLI_EXIT_ERROR, -ENOENT,
                       "cert: controld has no certificate (it listens on no tls+tcp:// URL)");
            break;
        }
        if (cmd->json) {
            doc = json_pack("{s:o}", "fingerprint", cli_json_str(rep->fingerprint));
        } else {
            (void)fprintf(out, "SHA-256 %s\n", rep->fingerprint);
        }
        break;
    case FGX__CTL__REQUEST__REQ_CONFIG_EXPORT:
        rc = finish_export(cmd, l, rep, out, &doc);
        if (strcmp(cmd->file, "-") == 0)
            return rc < 0 ? rc : ((fflush(out) == EOF || ferror(out)) ? -EIO : 0);
        break;
    case FGX__CTL__REQUEST__REQ_CONFIG_IMPORT: {
        bool dry = rep->has_dry_run && rep->dry_run;

        if (cmd->json) {
            doc = json_pack("{s:o, s:I, s:I, s:b, s:o}", "imported", cli_json_str(cmd->file),
                            "services", cli_json_int(l->config ? l->config->n_services : 0),
                            "filters", cli_json_int(l->config ? l->config->n_filters : 0),
                            "dry_run", dry, "diff", cli_cmd_diff_json(rep));
            if (doc && rep->has_auth_enabled)
                (void)json_object_set_new(doc, "auth_enabled", json_boolean(rep->auth_enabled));
        } else {
            size_t ns = l->config ? l->config->n_services : 0;
            size_t nf = l->config ? l->config->n_filters : 0;

            rc = cli_cmd_diff_print(out, rep);
            if (!dry)
                (void)fprintf(out, "imported %zu service%s and %zu filter%s from %s\n", ns,
                              ns == 1 ? "" : "s", nf, nf == 1 ? "" : "s", cmd->file);
            /* An import never opens (or closes) the box: say so, the backup may differ. */
            if (rep->has_auth_enabled)
                (void)fprintf(out, "auth settings are not imported: auth stays %s\n",
                              rep->auth_enabled ? "on" : "off");
        }
        break;
    }
    case FGX__CTL__REQUEST__REQ_FILTER_IMPORT: {
        bool dry = rep->has_dry_run && rep->dry_run;
        bool whole = cmd->m.filter_import.sync || cmd->m.filter_import.replace;

        if (cmd->json && (dry || cmd->m.filter_import.sync)) {
            /* The diff is what --sync and --dry-run are for: an object, not only the list. */
            doc = json_pack("{s:b, s:o, s:o}", "dry_run", dry, "diff", cli_cmd_diff_json(rep),
                            "filters", cli_fmt_json_filters(rep));
        } else if (cmd->json) {
            doc = cli_fmt_json_filters(rep);
        } else {
            if (dry || whole)
                rc = cli_cmd_diff_print(out, rep);
            cli_fmt_escape(cmd->m.filter_import.service, name, sizeof(name));
            if (!dry)
                (void)fprintf(out, "imported %zu filter%s into %s%s\n",
                              cmd->m.filter_import.n_filters,
                              cmd->m.filter_import.n_filters == 1 ? "" : "s", name,
                              cmd->m.filter_import.sync      ? ", which has exactly those now"
                              : cmd->m.filter_import.replace ? ", replacing its other filters"
                                                             : "");
        }
        break;
    }
    case FGX__CTL__REQUEST__REQ_FILTER_EXPORT:
        if (cmd->json) {
            doc = cli_fmt_json_filters(rep);
            break;
        }
        cli_fmt_escape(rep->n_services > 0 ? rep->services[0]->name : cmd->m.ref.ref, name,
                       sizeof(name));
        rc = cli_ruleset_write(out, name, rep->filters, rep->n_filters, why, sizeof(why));
        if (rc == -EINVAL)
            rc = lfail(l, CLI_EXIT_ERROR, rc, "filter export: %s", why);
        return rc;
    case FGX__CTL__REQUEST__REQ_FW_LIST:
        if (!cmd->file)
            return 0;
        rc = finish_fw_export(cmd, l, rep, out, &doc);
        break;
    default:
        return 0;
    }
    if (rc < 0) {
        json_decref(doc);
        return rc;
    }
    if (cmd->json && cli_json_print(out, doc, false) < 0)
        return lfail(l, CLI_EXIT_ERROR, -EIO, "cannot write the output");
    if (fflush(out) == EOF || ferror(out))
        return lfail(l, CLI_EXIT_ERROR, -EIO, "cannot write the output");
    return 0;
}

void cli_local_release(struct cli_cmd *cmd, struct cli_local *l)
{
    if (l->password) {
        explicit_bzero(l->password, strlen(l->password));
        free(l->password);
        l->password = NULL;
    }
    if (l->config) {
        fgx__ctl__config__free_unpacked(l->config, NULL);
        l->config = NULL;
        cmd->req.config_import = NULL;
    }
    if (l->ruleset) {
        cli_ruleset_release(&cmd->m.filter_import);
        l->ruleset = false;
    }
    if (l->fw_text) {
        cli_fw_file_release(&cmd->m.fw.imp);
        free(l->fw_text);
        l->fw_text = NULL;
    }
    free(l->script);
    l->script = NULL;
}
