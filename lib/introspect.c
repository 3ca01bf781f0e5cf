/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* introspect.c - the public view of the tunables table and of a context's configuration. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t devcache_tunable_count(void)
{
	return TUN_COUNT;
}

int devcache_tunable_describe(size_t index, devcache_tunable_desc_t *desc)
{
	if (!desc)
		return err_set(DEVCACHE_EINVAL, _("devcache_tunable_describe: NULL argument"));
	if (index >= TUN_COUNT)
		return err_set(DEVCACHE_ENOENT, _("no tunable %zu: there are %d"), index, TUN_COUNT);
	const struct tunable_def *def = &tunable_defs[index];
	memset(desc, 0, sizeof *desc);
	desc->name = def->name;
	desc->type = tunable_type_name(def->type);
	desc->default_value = def->defval;
	desc->range = def->range;
	desc->group = tunable_group_name(def->group);
	desc->summary = _(def->summary);
	desc->description = def->doc;
	desc->effective = !(def->flags & T_PENDING);
	return 0;
}

size_t devcache_config_count(devcache_ctx_t *ctx)
{
	return TUN_COUNT + (ctx ? ctx->mod_tun.n : 0);
}

int devcache_config_describe(devcache_ctx_t *ctx, size_t index, devcache_tunable_desc_t *desc)
{
	if (!ctx || !desc)
		return err_set(DEVCACHE_EINVAL, _("devcache_config_describe: NULL argument"));
	if (index < TUN_COUNT)
		return devcache_tunable_describe(index, desc);
	if (index - TUN_COUNT >= ctx->mod_tun.n)
		return err_set(DEVCACHE_ENOENT, _("no tunable %zu: there are %zu"), index,
			       devcache_config_count(ctx));
	const struct module_tunable *t = &ctx->mod_tun.t[index - TUN_COUNT];
	memset(desc, 0, sizeof *desc);
	desc->name = t->def.name;
	desc->type = tunable_type_name(t->def.type);
	desc->default_value = t->def.defval;
	desc->range = t->def.range;
	desc->group = tunable_group_name(t->def.group);
	/* The modules shipped with libdevcache have their summaries translated
	 * in its catalogue; another module's come back as they are. */
	desc->summary = _(t->def.summary);
	desc->description = t->def.doc;
	desc->effective = 1;
	desc->module = t->module;
	return 0;
}

int devcache_config_get(devcache_ctx_t *ctx, const char *name, char *buf, size_t buf_size,
			const char **origin_p)
{
	if (!ctx || !name || !buf || !buf_size)
		return err_set(DEVCACHE_EINVAL, _("devcache_config_get: NULL argument"));
	int id = tunable_find(name);
	const struct module_tunable *t = id < 0 ? module_tunables_find(&ctx->mod_tun, name) : NULL;
	if (id < 0 && !t)
		return err_set(DEVCACHE_ENOENT, _("unknown tunable '%s'"), name);
	const char *text = t ? t->text : ctx->tun_text[id];
	if ((size_t)snprintf(buf, buf_size, "%s", text) >= buf_size)
		return err_set(DEVCACHE_EINVAL, _("%s: the value needs %zu bytes, the buffer has %zu"),
			       name, strlen(text) + 1, buf_size);
	if (origin_p)
		*origin_p = t ? t->v.origin : tunable_origin(&ctx->tun, id);
	return 0;
}

struct check_sink {
	struct log_state *log;
	char first[1024]; /* the detail message is the first error, not the last */
};

static void report_error(void *user, const char *message)
{
	struct check_sink *sink = user;

	if (!sink->first[0])
		snprintf(sink->first, sizeof sink->first, "%s", message);
	log_msg(sink->log, DEVCACHE_LOG_ERROR, "%s", message);
}

int devcache_config_check_file(const char *path, devcache_log_fn log_fn, void *user)
{
	struct tunable_set set;
	struct log_state log;
	struct check_sink sink = {.log = &log};
	int rc;

	if (!path)
		return err_set(DEVCACHE_EINVAL, _("devcache_config_check_file: NULL argument"));
	if ((rc = tunable_set_defaults(&set)))
		return rc;
	log_init(&log, log_fn, user);
	log_flush(&log, DEVCACHE_LOG_WARNING);
	rc = config_apply_file(&set, path, true, &log, report_error, &sink);
	/* What no tunable of the core's took may be a module's, of the modules
	 * a program would find: DEVCACHE_BACKEND_PATH overrides the file. */
	if (set.n_pending) {
		const char *dirs = secure_getenv("DEVCACHE_BACKEND_PATH");
		int r = backends_check_config(&set, dirs && *dirs ? dirs : NULL, &log, report_error,
					      &sink);

		rc = rc ? rc : r;
	}
	tunable_set_free(&set);
	log_destroy(&log);
	if (rc)
		err_set(rc, "%s", sink.first);
	return rc;
}
