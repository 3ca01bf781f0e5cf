/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-config-open.c - the sources' precedence, devcache_open and the environment, argument checks. */
#include "config.h"

#include "config-fixture.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- precedence ---------------------------------------------------------------- */

static void sources_precedence(void **state)
{
	struct fixture *fx = *state;
	char sys[PATH_MAX], user[PATH_MAX], conf[PATH_MAX];
	struct config_sources src = {
		.backend_path = "/env/modules",
		.env_options = "max_cache_ram:4G,max_cache_vram:4G",
		.options = "max_cache_vram:5G,direct_io:true",
	};

	src.system_file = write_file(fx, "system.conf",
				     "load_workers = 3\nstaging_buffers = 3\nlog_level = error\n"
				     "max_cache_ram = 1G\nmax_cache_vram = 1G\nbackend_path = /system\n",
				     sys, sizeof sys);
	src.user_file = write_file(fx, "user.conf",
				   "staging_buffers = 4\nlog_level = info\nmax_cache_ram = 2G\n"
				   "max_cache_vram = 2G\nbackend_path = /user\n",
				   user, sizeof user);
	src.conf_file = write_file(fx, "conf.conf",
				   "log_level = debug\nmax_cache_ram = 3G\nmax_cache_vram = 3G\n"
				   "backend_path = /conf\n",
				   conf, sizeof conf);
	assert_int_equal(config_apply_sources(&fx->set, &src, &fx->log), 0);
	assert_string_equal(value(fx, TUN_load_workers), "3");
	assert_string_equal(origin(fx, TUN_load_workers), at(sys, 1));
	assert_string_equal(value(fx, TUN_staging_buffers), "4");
	assert_string_equal(origin(fx, TUN_staging_buffers), at(user, 1));
	assert_string_equal(value(fx, TUN_log_level), "debug");
	assert_string_equal(origin(fx, TUN_log_level), at(conf, 1));
	assert_string_equal(value(fx, TUN_backend_path), "/env/modules");
	assert_string_equal(origin(fx, TUN_backend_path), "DEVCACHE_BACKEND_PATH");
	assert_string_equal(value(fx, TUN_max_cache_ram), "4G");
	assert_string_equal(origin(fx, TUN_max_cache_ram), "DEVCACHE_OPTIONS");
	assert_string_equal(value(fx, TUN_max_cache_vram), "5G");
	assert_string_equal(origin(fx, TUN_max_cache_vram), "devcache_open");
	assert_string_equal(value(fx, TUN_direct_io), "true");
	assert_string_equal(origin(fx, TUN_direct_io), "devcache_open");
	assert_string_equal(value(fx, TUN_keep_ram_copy), "true");
	assert_string_equal(origin(fx, TUN_keep_ram_copy), "default");
}

static void sources_options_after_backend_path(void **state)
{
	struct fixture *fx = *state;
	struct config_sources src = {
		.backend_path = "/env/modules",
		.env_options = "backend_path:/opts/modules",
	};

	assert_int_equal(config_apply_sources(&fx->set, &src, &fx->log), 0);
	assert_string_equal(value(fx, TUN_backend_path), "/opts/modules");
	assert_string_equal(origin(fx, TUN_backend_path), "DEVCACHE_OPTIONS");
	src.options = "backend_path:/open/modules";
	assert_int_equal(config_apply_sources(&fx->set, &src, &fx->log), 0);
	assert_string_equal(origin(fx, TUN_backend_path), "devcache_open");
}

static void sources_missing_files(void **state)
{
	struct fixture *fx = *state;
	char sys[PATH_MAX], user[PATH_MAX], conf[PATH_MAX], expect[PATH_MAX + 128];
	struct config_sources src = {.system_file = sys, .user_file = user, .env_options = "load_workers:9"};

	xsnprintf(sys, sizeof sys, "%s/no-system.conf", fx->dir);
	xsnprintf(user, sizeof user, "%s/no-user.conf", fx->dir);
	xsnprintf(conf, sizeof conf, "%s/no-conf.conf", fx->dir);
	assert_int_equal(config_apply_sources(&fx->set, &src, &fx->log), 0);
	assert_string_equal(origin(fx, TUN_load_workers), "DEVCACHE_OPTIONS");
	/* DEVCACHE_CONF names a file the user wants: missing is an error, and stops */
	src.conf_file = conf;
	src.env_options = "staging_buffers:9";
	assert_int_equal(config_apply_sources(&fx->set, &src, &fx->log), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect, "%s: cannot open configuration file: %s",
		 conf, strerror(ENOENT));
	assert_string_equal(devcache_last_error(), expect);
	assert_string_equal(origin(fx, TUN_staging_buffers), "default");
}

/* ---- devcache_open and the real environment -------------------------------------- */

static void open_reads_environment(void **state)
{
	struct fixture *fx = *state;
	char user[PATH_MAX], conf[PATH_MAX], modules[PATH_MAX];
	const char *orig;

	write_file(fx, "devcache/devcache.conf",
		   "load_workers = 3\nstaging_buffers = 3\nmax_cache_ram = 1G\nmax_cache_vram = 1G\n",
		   user, sizeof user);
	write_file(fx, "extra.conf", "staging_buffers = 5\nmax_cache_ram = 2G\nmax_cache_vram = 2G\n",
		   conf, sizeof conf);
	xsnprintf(modules, sizeof modules, "%s/modules", fx->dir);
	setenv("XDG_CONFIG_HOME", fx->dir, 1);
	setenv("DEVCACHE_CONF", conf, 1);
	setenv("DEVCACHE_BACKEND_PATH", modules, 1);
	setenv("DEVCACHE_OPTIONS", "max_cache_ram:3G,max_cache_vram:3G", 1);
	assert_int_equal(devcache_open(&fx->ctx, "max_cache_vram:4G"), 0);
	assert_string_equal(ctx_get(fx->ctx, "load_workers", &orig), "3");
	assert_string_equal(orig, at(user, 1));
	assert_string_equal(ctx_get(fx->ctx, "staging_buffers", &orig), "5");
	assert_string_equal(orig, at(conf, 1));
	assert_string_equal(ctx_get(fx->ctx, "max_cache_ram", &orig), "3G");
	assert_string_equal(orig, "DEVCACHE_OPTIONS");
	assert_string_equal(ctx_get(fx->ctx, "max_cache_vram", &orig), "4G");
	assert_string_equal(orig, "devcache_open");
	assert_string_equal(ctx_get(fx->ctx, "backend_path", &orig), modules);
	assert_string_equal(orig, "DEVCACHE_BACKEND_PATH");
	ctx_get(fx->ctx, "keep_ram_copy", &orig);
	assert_default_or_system(orig);
}

static void open_user_file_from_home(void **state)
{
	struct fixture *fx = *state;
	char user[PATH_MAX];
	const char *orig;

	write_file(fx, ".config/devcache/devcache.conf", "# home\nload_workers = 6\n", user, sizeof user);
	unsetenv("XDG_CONFIG_HOME");
	setenv("HOME", fx->dir, 1);
	assert_int_equal(open_ex(fx, NULL, 0), 0);
	assert_string_equal(ctx_get(fx->ctx, "load_workers", &orig), "6");
	assert_string_equal(orig, at(user, 2));
	/* a relative XDG_CONFIG_HOME is ignored, as the XDG specification says */
	setenv("XDG_CONFIG_HOME", "relative/config", 1);
	assert_int_equal(open_ex(fx, NULL, 0), 0);
	assert_string_equal(ctx_get(fx->ctx, "load_workers", &orig), "6");
	assert_string_equal(orig, at(user, 2));
}

static void open_no_env(void **state)
{
	struct fixture *fx = *state;
	char user[PATH_MAX], missing[PATH_MAX];
	const char *orig;

	write_file(fx, "devcache/devcache.conf", "load_workers = 5\n", user, sizeof user);
	xsnprintf(missing, sizeof missing, "%s/missing.conf", fx->dir);
	setenv("XDG_CONFIG_HOME", fx->dir, 1);
	setenv("DEVCACHE_CONF", missing, 1);
	setenv("DEVCACHE_OPTIONS", "staging_buffers:9", 1);
	setenv("DEVCACHE_BACKEND_PATH", "/env/modules", 1);
	setenv("DEVCACHE_FROB", "1", 1);
	assert_int_equal(open_ex(fx, "direct_io:true", DEVCACHE_OPEN_NO_ENV), 0);
	ctx_get(fx->ctx, "load_workers", &orig);
	assert_default_or_system(orig);
	ctx_get(fx->ctx, "staging_buffers", &orig);
	assert_default_or_system(orig);
	ctx_get(fx->ctx, "backend_path", &orig);
	assert_default_or_system(orig);
	assert_string_equal(ctx_get(fx->ctx, "direct_io", &orig), "true");
	assert_string_equal(orig, "devcache_open");
	assert_int_equal(capture_count(&fx->cap, -1, "DEVCACHE_FROB"), 0);

	/* both flags: nothing but the string */
	assert_int_equal(open_ex(fx, "direct_io:true", DEVCACHE_OPEN_NO_ENV | DEVCACHE_OPEN_NO_FILES), 0);
	assert_string_equal(ctx_get(fx->ctx, "load_workers", &orig), "2");
	assert_string_equal(orig, "default");
	assert_string_equal(ctx_get(fx->ctx, "backend_path", &orig), BACKENDDIR);
	assert_string_equal(orig, "default");
	assert_int_equal(fx->cap.n, 0);
}

static void open_no_files(void **state)
{
	struct fixture *fx = *state;
	char user[PATH_MAX], missing[PATH_MAX];
	const char *orig;

	write_file(fx, "devcache/devcache.conf", "load_workers = 5\n", user, sizeof user);
	xsnprintf(missing, sizeof missing, "%s/missing.conf", fx->dir);
	setenv("XDG_CONFIG_HOME", fx->dir, 1);
	setenv("DEVCACHE_CONF", missing, 1); /* an error, were it read */
	setenv("DEVCACHE_OPTIONS", "staging_buffers:6", 1);
	assert_int_equal(open_ex(fx, NULL, DEVCACHE_OPEN_NO_FILES), 0);
	assert_string_equal(ctx_get(fx->ctx, "load_workers", &orig), "2");
	assert_string_equal(orig, "default");
	assert_string_equal(ctx_get(fx->ctx, "staging_buffers", &orig), "6");
	assert_string_equal(orig, "DEVCACHE_OPTIONS");
	/* without the flag the missing DEVCACHE_CONF fails the open */
	assert_int_equal(open_ex(fx, NULL, 0), DEVCACHE_ECONFIG);
	assert_null(fx->ctx);
	assert_contains(devcache_last_error(), missing);
	assert_contains(devcache_last_error(), "cannot open configuration file");
}

static void open_bad_values(void **state)
{
	struct fixture *fx = *state;
	char conf[PATH_MAX], expect[PATH_MAX + 256];

	setenv("DEVCACHE_OPTIONS", "max_split_size_mb:abc", 1);
	{
		devcache_open_args_t args = {.struct_size = sizeof args,
					     .log_fn = capture_fn,
					     .log_user = &fx->cap,
					     .flags = DEVCACHE_OPEN_NO_FILES};
		devcache_ctx_t *ctx = (devcache_ctx_t *)&args; /* must be reset to NULL */

		assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_ECONFIG);
		assert_null(ctx);
	}
	assert_string_equal(devcache_last_error(),
			    "DEVCACHE_OPTIONS: max_split_size_mb: invalid size 'abc' (expected a size in "
			    "MiB such as 512, or with a unit such as 2G, or unlimited)");
	if (!system_file_present()) {
		assert_int_equal(devcache_open(&fx->ctx, NULL), DEVCACHE_ECONFIG);
		assert_null(fx->ctx);
		assert_contains(devcache_last_error(), "DEVCACHE_OPTIONS: max_split_size_mb: invalid size 'abc'");
	}
	unsetenv("DEVCACHE_OPTIONS");

	assert_int_equal(open_ex(fx, "load_workers:0", DEVCACHE_OPEN_NO_FILES), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(),
			    "devcache_open: load_workers: '0' is out of range (accepted: at least 1 and "
			    "at most 64)");

	write_file(fx, "bad.conf", "load_workers = 4\nlog_level = loud\n", conf, sizeof conf);
	setenv("DEVCACHE_CONF", conf, 1);
	assert_int_equal(open_ex(fx, NULL, 0), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect,
		 "%s:2: log_level: invalid enum 'loud' (expected one of: none, error, warning, info, "
		 "debug)",
		 conf);
	assert_string_equal(devcache_last_error(), expect);
}

/* A slip in a name gets its "did you mean" wherever the name is written:
 * the open string, DEVCACHE_OPTIONS, a configuration file, and the name
 * of an environment variable.  PyTorch's options, which are accepted and
 * ignored, are names a user writes too. */
static void unknown_names_get_a_hint_everywhere(void **state)
{
	struct fixture *fx = *state;
	char conf[4096], expect[4608];

	assert_int_equal(open_ex(fx, "pinned_use_cuda_host_registr:True", DEVCACHE_OPEN_NO_FILES),
			 DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(),
			    "devcache_open: unknown tunable 'pinned_use_cuda_host_registr' (did you "
			    "mean 'pinned_use_cuda_host_register'?)");

	setenv("DEVCACHE_OPTIONS", "pinned_use_cuda_host_registr:True", 1);
	assert_int_equal(open_ex(fx, NULL, DEVCACHE_OPEN_NO_FILES), DEVCACHE_ECONFIG);
	assert_string_equal(devcache_last_error(),
			    "DEVCACHE_OPTIONS: unknown tunable 'pinned_use_cuda_host_registr' (did you "
			    "mean 'pinned_use_cuda_host_register'?)");
	unsetenv("DEVCACHE_OPTIONS");

	write_file(fx, "slip.conf", "pinned_use_cuda_host_registr = True\n", conf, sizeof conf);
	setenv("DEVCACHE_CONF", conf, 1);
	assert_int_equal(open_ex(fx, NULL, 0), DEVCACHE_ECONFIG);
	xsnprintf(expect, sizeof expect,
		  "%s:1: unknown tunable 'pinned_use_cuda_host_registr' (did you mean "
		  "'pinned_use_cuda_host_register'?)",
		  conf);
	assert_string_equal(devcache_last_error(), expect);
	unsetenv("DEVCACHE_CONF");

	setenv("DEVCACHE_MAX_SPLT_SIZE_MB", "512", 1);
	assert_int_equal(open_ex(fx, NULL, DEVCACHE_OPEN_NO_FILES), 0);
	unsetenv("DEVCACHE_MAX_SPLT_SIZE_MB");
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_WARNING,
				       "unknown environment variable DEVCACHE_MAX_SPLT_SIZE_MB is ignored "
				       "(did you mean DEVCACHE_OPTIONS=max_split_size_mb:VALUE?)"),
			 1);
	/* PyTorch's options are not set through DEVCACHE_OPTIONS either. */
	setenv("DEVCACHE_BACKEND", "native", 1);
	assert_int_equal(open_ex(fx, NULL, DEVCACHE_OPEN_NO_FILES), 0);
	unsetenv("DEVCACHE_BACKEND");
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_WARNING, "DEVCACHE_OPTIONS=backend:"), 0);
}

static void open_warns_unknown_env(void **state)
{
	struct fixture *fx = *state;

	setenv("DEVCACHE_OPTION", "log_level:debug", 1);
	setenv("DEVCACHE_MAX_SPLIT_SIZE_MB", "512", 1);
	setenv("DEVCACHE_FROB", "1", 1);
	setenv("DEVCACHE_CONFIG", "/etc/devcache.conf", 1);
	setenv("DEVCACHE_OPTIONS", "load_workers:3", 1);
	assert_int_equal(open_ex(fx, NULL, DEVCACHE_OPEN_NO_FILES), 0);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_WARNING,
				       "unknown environment variable DEVCACHE_OPTION is ignored (did "
				       "you mean DEVCACHE_OPTIONS?)"),
			 1);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_WARNING,
				       "environment variable DEVCACHE_MAX_SPLIT_SIZE_MB is ignored: set "
				       "tunables with DEVCACHE_OPTIONS=max_split_size_mb:VALUE"),
			 1);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_WARNING,
				       "unknown environment variable DEVCACHE_FROB is ignored "
				       "(libdevcache reads DEVCACHE_CONF, DEVCACHE_OPTIONS, "
				       "DEVCACHE_BACKEND_PATH and DEVCACHE_LOCALEDIR)"),
			 1);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_WARNING,
				       "unknown environment variable DEVCACHE_CONFIG is ignored (did "
				       "you mean DEVCACHE_CONF?)"),
			 1);
	/* the variables libdevcache reads are not warned about */
	assert_int_equal(capture_count(&fx->cap, -1, "DEVCACHE_OPTIONS is ignored"), 0);
	assert_int_equal(capture_count(&fx->cap, -1, "DEVCACHE_LOCALEDIR is ignored"), 0);
	assert_string_equal(ctx_get(fx->ctx, "load_workers", NULL), "3");

	/* the warnings pass through log_level like every message */
	setenv("DEVCACHE_OPTIONS", "log_level:error", 1);
	assert_int_equal(open_ex(fx, NULL, DEVCACHE_OPEN_NO_FILES), 0);
	assert_int_equal(capture_count(&fx->cap, -1, "environment variable"), 0);
}

static void open_log_level_filters(void **state)
{
	static const char *const loaded = "backend host (built-in): loaded, 1 device";
	struct fixture *fx = *state;
	const unsigned flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV;

	assert_int_equal(open_ex(fx, "log_level:debug", flags), 0);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_DEBUG, loaded), 1);

	assert_int_equal(open_ex(fx, NULL, flags), 0);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_DEBUG, ""), 0);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_INFO, ""), 0);

	/* info: the PyTorch key's message, but no debug */
	assert_int_equal(open_ex(fx, "log_level:info,backend:native", flags), 0);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_INFO,
				       "devcache_open: backend is a PyTorch option that libdevcache "
				       "accepts and ignores"),
			 1);
	assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_DEBUG, ""), 0);

	/* the level is known only at the end: an earlier message still obeys it */
	assert_int_equal(open_ex(fx, "backend:native,log_level:warning", flags), 0);
	assert_int_equal(fx->cap.n, 0);

	/* a level set in a file works the same */
	{
		char conf[PATH_MAX];

		write_file(fx, "debug.conf", "log_level = debug\n", conf, sizeof conf);
		setenv("DEVCACHE_CONF", conf, 1);
		assert_int_equal(open_ex(fx, NULL, 0), 0);
		assert_int_equal(capture_count(&fx->cap, DEVCACHE_LOG_DEBUG, loaded), 1);
	}
}

/* ---- argument checks ------------------------------------------------------------- */

static void open_ex_validation(void **state)
{
	struct fixture *fx = *state;
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .log_fn = capture_fn,
				     .log_user = &fx->cap,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV};
	devcache_ctx_t *ctx = (devcache_ctx_t *)&args;

	assert_int_equal(devcache_open_ex(NULL, &args), DEVCACHE_EINVAL);
	assert_string_equal(devcache_last_error(), "devcache_open_ex: NULL argument");
	assert_int_equal(devcache_open_ex(&ctx, NULL), DEVCACHE_EINVAL);
	assert_string_equal(devcache_last_error(), "devcache_open_ex: NULL argument");
	assert_int_equal(devcache_open(NULL, NULL), DEVCACHE_EINVAL);

	args.struct_size = 0;
	assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_EINVAL);
	assert_null(ctx);
	assert_string_equal(devcache_last_error(),
			    "devcache_open_ex: struct_size 0 is not that of any known devcache_open_args_t");
	args.struct_size = sizeof args + 8;
	assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "struct_size");
	args.struct_size = offsetof(devcache_open_args_t, reserved) - 1;
	assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_EINVAL);

	args.struct_size = sizeof args;
	args.flags = 0x4;
	assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_EINVAL);
	assert_null(ctx);
	assert_string_equal(devcache_last_error(), "devcache_open_ex: unknown flags 0x4");
	args.flags = DEVCACHE_OPEN_NO_FILES | 0x80000000u;
	assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "unknown flags 0x80000001");

	/* a caller built against a struct without the reserved tail still opens */
	args.flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV;
	args.struct_size = offsetof(devcache_open_args_t, reserved);
	assert_int_equal(devcache_open_ex(&fx->ctx, &args), 0);
	assert_non_null(fx->ctx);
}

static void config_get_errors(void **state)
{
	struct fixture *fx = *state;
	char small[4], buf[64];
	const char *orig = "unset";

	assert_int_equal(open_ex(fx, "log_level:info", DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV), 0);
	assert_int_equal(devcache_config_get(fx->ctx, "log_level", buf, sizeof buf, NULL), 0);
	assert_string_equal(buf, "info");
	assert_int_equal(devcache_config_get(fx->ctx, "nope", buf, sizeof buf, &orig), DEVCACHE_ENOENT);
	assert_string_equal(devcache_last_error(), "unknown tunable 'nope'");
	assert_string_equal(orig, "unset");
	assert_int_equal(devcache_config_get(fx->ctx, "log_level", small, sizeof small, &orig),
			 DEVCACHE_EINVAL);
	assert_string_equal(devcache_last_error(), "log_level: the value needs 5 bytes, the buffer has 4");
	assert_int_equal(devcache_config_get(NULL, "log_level", buf, sizeof buf, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_config_get(fx->ctx, NULL, buf, sizeof buf, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_config_get(fx->ctx, "log_level", NULL, 8, NULL), DEVCACHE_EINVAL);
	assert_int_equal(devcache_config_get(fx->ctx, "log_level", buf, 0, NULL), DEVCACHE_EINVAL);
	assert_string_equal(devcache_last_error(), "devcache_config_get: NULL argument");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(sources_precedence),
		T(sources_options_after_backend_path),
		T(sources_missing_files),
		T(open_reads_environment),
		T(open_user_file_from_home),
		T(open_no_env),
		T(open_no_files),
		T(open_bad_values),
		T(open_warns_unknown_env),
		T(unknown_names_get_a_hint_everywhere),
		T(open_log_level_filters),
		T(open_ex_validation),
		T(config_get_errors),
	};

	no_outside_config();
	return RUN_TAP(tests);
}
