/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* context.c - open and close a context: configuration, logging, backends and devices together. */
#include "backend.h"
#include "trace.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

static void ctx_free(devcache_ctx_t *ctx)
{
	model_cache_destroy(ctx);
	devices_stop_allocators(ctx);
	for (size_t i = 0; i < ctx->n_traces; i++)
		trace_close(ctx->traces[i]);
	free(ctx->traces);
	backends_unload(ctx);
	module_tunables_free(&ctx->mod_tun);
	free(ctx->devices);
	for (int i = 0; i < TUN_COUNT; i++)
		free(ctx->tun_text[i]);
	tunable_set_free(&ctx->tun);
	log_destroy(&ctx->log);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}

static int configure(devcache_ctx_t *ctx, const devcache_open_args_t *args,
		     const char *torch_options, bool torch_no_caching)
{
	struct config_sources src = {.system_file = SYSCONFDIR "/devcache.conf"};
	char *user = NULL;
	int rc = tunable_set_defaults(&ctx->tun);

	if (rc)
		return rc;
	if (!(args->flags & DEVCACHE_OPEN_NO_ENV)) {
		if ((rc = config_sources_from_env(&src, &user)))
			return rc;
		config_warn_unknown_env(&ctx->log);
	}
	if (args->flags & DEVCACHE_OPEN_NO_FILES)
		src.system_file = src.user_file = src.conf_file = NULL;
	src.torch_options = torch_options;
	src.torch_no_caching = torch_no_caching;
	src.options = args->options;
	rc = config_apply_sources(&ctx->tun, &src, &ctx->log);
	free(user);
	for (int i = 0; i < TUN_COUNT && !rc; i++) {
		char text[4096];

		tunable_format(i, &ctx->tun.v[i], text, sizeof text);
		if (!(ctx->tun_text[i] = strdup(text)))
			rc = err_oom();
	}
	return rc;
}

int context_open(devcache_ctx_t **ctx_p, const devcache_open_args_t *args,
		 const char *torch_options, bool torch_no_caching)
{
	devcache_open_args_t a = {0};
	devcache_ctx_t *ctx;
	int rc;

	if (!ctx_p || !args)
		return err_set(DEVCACHE_EINVAL, _("devcache_open_ex: NULL argument"));
	*ctx_p = NULL;
	if (args->struct_size < offsetof(devcache_open_args_t, reserved) ||
	    args->struct_size > sizeof a)
		return err_set(DEVCACHE_EINVAL,
			       _("devcache_open_ex: struct_size %zu is not that of any known "
				 "devcache_open_args_t"),
			       args->struct_size);
	memcpy(&a, args, args->struct_size);
	if (a.flags & ~(DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV))
		return err_set(DEVCACHE_EINVAL, _("devcache_open_ex: unknown flags 0x%x"), a.flags);
	if (!(ctx = calloc(1, sizeof *ctx)))
		return err_oom();
	log_init(&ctx->log, a.log_fn, a.log_user);
	pthread_mutex_init(&ctx->lock, NULL);
	err_clear();
	rc = configure(ctx, &a, torch_options, torch_no_caching);
	/* Messages queued while reading the configuration pass at the level it
	 * asked for, or at the default one when it could not be read. */
	log_flush(&ctx->log, rc ? DEVCACHE_LOG_WARNING : tun_get(&ctx->tun, log_level));
	if (rc == 0)
		rc = backends_load(ctx);
	if (rc == 0)
		rc = devices_start_allocators(ctx);
	if (rc) {
		ctx_free(ctx);
		return rc;
	}
	/* An opt-in for the whole program, as the tunable says: its large
	 * malloc() blocks then come from mmap and go back when freed. */
	if (tun_get(&ctx->tun, malloc_mmap_threshold) &&
	    !mallopt(M_MMAP_THRESHOLD, (int)tun_get(&ctx->tun, malloc_mmap_threshold)))
		log_msg(&ctx->log, DEVCACHE_LOG_WARNING, _("mallopt(M_MMAP_THRESHOLD) failed"));
	*ctx_p = ctx;
	return 0;
}

int devcache_open_ex(devcache_ctx_t **ctx_p, const devcache_open_args_t *args)
{
	return context_open(ctx_p, args, NULL, false);
}

int devcache_open(devcache_ctx_t **ctx_p, const char *options)
{
	devcache_open_args_t args = {.struct_size = sizeof args, .options = options};

	return devcache_open_ex(ctx_p, &args);
}

void devcache_close(devcache_ctx_t *ctx)
{
	if (ctx)
		ctx_free(ctx);
}

void devcache_set_log_handler(devcache_ctx_t *ctx, devcache_log_fn fn, void *user)
{
	if (!ctx)
		return;
	pthread_mutex_lock(&ctx->log.lock);
	ctx->log.fn = fn ? fn : log_default_handler;
	ctx->log.user = fn ? user : NULL;
	pthread_mutex_unlock(&ctx->log.lock);
}
