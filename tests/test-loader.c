/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-loader.c - the backend loader against test-only modules: good, wrong ABI, missing entries, failing init. */
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <devcache.h>

struct captured {
	char text[16384];
};

static void capture(void *user, enum devcache_log_level level, const char *msg)
{
	struct captured *c = user;
	size_t used = strlen(c->text);

	snprintf(c->text + used, sizeof c->text - used, "[%d] %s\n", (int)level, msg);
}

/* Open with only the test modules and the given extra options. */
static devcache_ctx_t *open_with(const char *extra, struct captured *log)
{
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .log_fn = capture,
				     .log_user = log};
	char options[4096];
	devcache_ctx_t *ctx = NULL;

	snprintf(options, sizeof options, "backend_path:%s%s%s", test_env("TEST_MODULES"),
		 extra ? "," : "", extra ? extra : "");
	args.options = options;
	if (log)
		log->text[0] = '\0';
	int rc = devcache_open_ex(&ctx, &args);
	if (rc)
		fail_msg("devcache_open_ex: %s", devcache_last_error());
	return ctx;
}

/* Open as open_with, expecting failure: the detail message. */
static const char *open_fails(const char *extra)
{
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV};
	char options[4096];
	devcache_ctx_t *ctx = NULL;

	snprintf(options, sizeof options, "backend_path:%s,%s", test_env("TEST_MODULES"), extra);
	args.options = options;
	assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_ECONFIG);
	assert_null(ctx);
	return devcache_last_error();
}

static devcache_backend_info_t backend(devcache_ctx_t *ctx, const char *name)
{
	devcache_backend_info_t info;

	for (size_t i = 0; i < devcache_backend_count(ctx); i++)
		if (devcache_backend_info(ctx, i, &info) == 0 && strcmp(info.name, name) == 0)
			return info;
	fail_msg("no backend record for %s", name);
	return info;
}

static void each_module_gets_its_verdict(void **state)
{
	struct captured log;
	devcache_ctx_t *ctx = open_with("log_level:debug", &log);
	devcache_backend_info_t b;

	(void)state;
	assert_int_equal(devcache_backend_info(ctx, 0, &b), 0);
	assert_string_equal(b.name, "host");
	assert_string_equal(b.path, "built-in");

	b = backend(ctx, "good");
	assert_int_equal(b.status, DEVCACHE_BACKEND_LOADED);
	assert_int_equal(b.device_count, 2);
	assert_contains(b.path, "good.so");

	b = backend(ctx, "badabi");
	assert_int_equal(b.status, DEVCACHE_BACKEND_UNAVAILABLE);
	assert_contains(b.reason, "built for backend ABI 999");

	b = backend(ctx, "missing");
	assert_int_equal(b.status, DEVCACHE_BACKEND_UNAVAILABLE);
	assert_string_equal(b.reason, "missing mandatory entry mem_alloc");

	b = backend(ctx, "failinit");
	assert_int_equal(b.status, DEVCACHE_BACKEND_UNAVAILABLE);
	assert_contains(b.reason, "initialisation failed: simulated driver failure");

	b = backend(ctx, "nodevice");
	assert_int_equal(b.status, DEVCACHE_BACKEND_LOADED);
	assert_int_equal(b.device_count, 0);
	assert_string_equal(b.reason, "simulated runtime: no accelerator present");

	b = backend(ctx, "misnamed");
	assert_int_equal(b.status, DEVCACHE_BACKEND_UNAVAILABLE);
	assert_contains(b.reason, "calls itself 'other'");

	b = backend(ctx, "notbackend");
	assert_int_equal(b.status, DEVCACHE_BACKEND_UNAVAILABLE);
	assert_contains(b.reason, "not a libdevcache backend module");

	/* host + good:0 + good:1 + newminor:0 + vmm:0 + vmm:1 */
	assert_int_equal(devcache_device_count(ctx), 6);
	/* The reasons are logged at debug level, and the backend read a tunable. */
	assert_contains(log.text, "backend badabi");
	assert_contains(log.text, "ABI 999");
	assert_contains(log.text, "good: initialised (log_level is debug)");
	devcache_close(ctx);
}

static void reasons_stay_quiet_by_default(void **state)
{
	struct captured log;
	devcache_ctx_t *ctx = open_with(NULL, &log);

	(void)state;
	assert_string_equal(log.text, "");
	devcache_close(ctx);
}

static void devices_are_named_and_described(void **state)
{
	devcache_ctx_t *ctx = open_with(NULL, NULL);
	devcache_device_t *dev, *dflt;
	devcache_device_info_t info;

	(void)state;
	assert_int_equal(devcache_device_get(ctx, "good:1", &dev), 0);
	assert_int_equal(devcache_device_info(dev, &info), 0);
	assert_string_equal(info.id, "good:1");
	assert_string_equal(info.name, "Fake device 1");
	assert_string_equal(info.backend, "good");
	assert_string_equal(info.pci_bus_id, "0000:02:00.0");
	assert_int_equal(info.ordinal, 1);
	assert_int_equal(info.total_memory, 2ull << 30);
	assert_int_equal(info.free_memory, 2ull << 30); /* nothing allocated */
	/* It claimed virtual memory without the entries: the core dropped it. */
	assert_int_equal(info.caps, DEVCACHE_CAP_ASYNC_COPY);
	/* With the entries, it stays. */
	assert_int_equal(devcache_device_get(ctx, "vmm:1", &dev), 0);
	assert_int_equal(devcache_device_info(dev, &info), 0);
	assert_int_equal(info.caps, DEVCACHE_CAP_ASYNC_COPY | DEVCACHE_CAP_VMM);
	assert_int_equal(devcache_device_get(ctx, "good", &dflt), 0);
	assert_int_equal(devcache_device_info(dflt, &info), 0);
	assert_string_equal(info.id, "good:0");
	devcache_close(ctx);
}

static void device_lookup_errors_say_why(void **state)
{
	devcache_ctx_t *ctx = open_with(NULL, NULL);
	devcache_device_t *dev;

	(void)state;
	assert_int_equal(devcache_device_get(ctx, "cuda:0", &dev), DEVCACHE_ENODEV);
	assert_contains(devcache_last_error(), "no backend named 'cuda'");
	assert_int_equal(devcache_device_get(ctx, "good:7", &dev), DEVCACHE_ENODEV);
	assert_contains(devcache_last_error(), "the good backend has 2 devices");
	assert_int_equal(devcache_device_get(ctx, "good:x", &dev), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "invalid device name 'good:x'");
	assert_int_equal(devcache_device_get(ctx, "good:-1", &dev), DEVCACHE_EINVAL);
	assert_int_equal(devcache_device_get(ctx, "badabi:0", &dev), DEVCACHE_ENODEV);
	assert_contains(devcache_last_error(), "the badabi backend is unavailable: built for");
	assert_int_equal(devcache_device_get(ctx, "nodevice:0", &dev), DEVCACHE_ENODEV);
	assert_contains(devcache_last_error(), "no accelerator present");
	assert_int_equal(devcache_device_at(ctx, 99, &dev), DEVCACHE_ENODEV);
	devcache_backend_info_t b;
	assert_int_equal(devcache_backend_info(ctx, 99, &b), DEVCACHE_ENOENT);
	devcache_close(ctx);
}

static void backends_tunable_selects_and_orders(void **state)
{
	devcache_ctx_t *ctx = open_with("backends:[nodevice,good]", NULL);
	devcache_backend_info_t b;

	(void)state;
	assert_int_equal(devcache_backend_info(ctx, 1, &b), 0);
	assert_string_equal(b.name, "nodevice");
	assert_int_equal(devcache_backend_info(ctx, 2, &b), 0);
	assert_string_equal(b.name, "good");
	assert_int_equal(b.status, DEVCACHE_BACKEND_LOADED);
	b = backend(ctx, "badabi");
	assert_int_equal(b.status, DEVCACHE_BACKEND_EXCLUDED);
	assert_string_equal(b.reason, "not named in the backends tunable");
	devcache_close(ctx);
}

static void backends_tunable_excludes(void **state)
{
	devcache_ctx_t *ctx = open_with("backends:^good,^badabi", NULL);
	devcache_backend_info_t b;
	devcache_device_t *dev;

	(void)state;
	b = backend(ctx, "good");
	assert_int_equal(b.status, DEVCACHE_BACKEND_EXCLUDED);
	assert_string_equal(b.reason, "excluded by the backends tunable");
	assert_int_equal(backend(ctx, "badabi").status, DEVCACHE_BACKEND_EXCLUDED);
	assert_int_equal(backend(ctx, "nodevice").status, DEVCACHE_BACKEND_LOADED);
	assert_int_equal(devcache_device_get(ctx, "good:0", &dev), DEVCACHE_ENODEV);
	/* host + newminor:0 + vmm:0 + vmm:1 */
	assert_int_equal(devcache_device_count(ctx), 4);
	devcache_close(ctx);

	ctx = open_with("backends:[all,^missing]", NULL);
	assert_int_equal(backend(ctx, "good").status, DEVCACHE_BACKEND_LOADED);
	assert_int_equal(backend(ctx, "missing").status, DEVCACHE_BACKEND_EXCLUDED);
	devcache_close(ctx);
}

static void named_but_absent_is_reported(void **state)
{
	devcache_ctx_t *ctx = open_with("backends:good,nosuch", NULL);
	devcache_backend_info_t b = backend(ctx, "nosuch");

	(void)state;
	assert_int_equal(b.status, DEVCACHE_BACKEND_NOT_FOUND);
	assert_contains(b.reason, "no module nosuch.so in ");
	assert_int_equal(backend(ctx, "good").status, DEVCACHE_BACKEND_LOADED);
	devcache_close(ctx);
}

static void host_cannot_be_excluded(void **state)
{
	struct captured log;
	devcache_ctx_t *ctx = open_with("backends:^host", &log);
	devcache_device_t *dev;

	(void)state;
	assert_contains(log.text, "the host backend is built in and cannot be excluded");
	assert_int_equal(devcache_device_get(ctx, "host", &dev), 0);
	devcache_close(ctx);
}

static void first_directory_wins_and_missing_ones_are_skipped(void **state)
{
	char opts[4096];
	devcache_ctx_t *ctx;
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = opts};

	(void)state;
	snprintf(opts, sizeof opts, "backend_path:/nonexistent/dir:%s:%s,backends:good",
		 test_env("TEST_MODULES"), "/tmp");
	assert_int_equal(devcache_open_ex(&ctx, &args), 0);
	devcache_backend_info_t b = backend(ctx, "good");
	assert_int_equal(b.status, DEVCACHE_BACKEND_LOADED);
	assert_contains(b.path, test_env("TEST_MODULES"));
	devcache_close(ctx);
}

static void no_module_directory_leaves_host(void **state)
{
	devcache_ctx_t *ctx;
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = "backend_path:/nonexistent"};

	(void)state;
	assert_int_equal(devcache_open_ex(&ctx, &args), 0);
	assert_int_equal(devcache_backend_count(ctx), 1);
	assert_int_equal(devcache_device_count(ctx), 1);
	devcache_close(ctx);
}

/* A FIFO named as a module would make dlopen() wait for a writer, and a
 * folder is no module either: each is reported, by its path, without
 * being opened (the alarm turns a hang into a failure). */
static void modules_that_are_not_regular_files_are_refused(void **state)
{
	char dir[] = "/tmp/devcache-loader-XXXXXX", fifo[64], sub[64], opts[4096], conf[96];
	struct captured log;
	devcache_ctx_t *ctx;
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV,
				     .options = opts,
				     .log_fn = capture,
				     .log_user = &log};

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(fifo, sizeof fifo, "%s/hip.so", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	snprintf(sub, sizeof sub, "%s/good.so", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	/* The good module stays in reach, behind the folder of its name. */
	snprintf(opts, sizeof opts, "backend_path:%s:%s", dir, test_env("TEST_MODULES"));
	log.text[0] = '\0';
	alarm(10);
	assert_int_equal(devcache_open_ex(&ctx, &args), 0);
	alarm(0);
	devcache_backend_info_t b = backend(ctx, "hip");
	assert_int_equal(b.status, DEVCACHE_BACKEND_UNAVAILABLE);
	assert_string_equal(b.path, fifo);
	assert_string_equal(b.reason, "not a regular file");
	b = backend(ctx, "good");
	assert_int_equal(b.status, DEVCACHE_BACKEND_UNAVAILABLE);
	assert_string_equal(b.path, sub);
	assert_string_equal(b.reason, "not a regular file");
	char want[256];
	snprintf(want, sizeof want, "[%d] backend hip (%s): not a regular file\n",
		 (int)DEVCACHE_LOG_WARNING, fifo);
	assert_contains(log.text, want);
	snprintf(want, sizeof want, "[%d] backend good (%s): not a regular file\n",
		 (int)DEVCACHE_LOG_WARNING, sub);
	assert_contains(log.text, want);
	devcache_close(ctx);
	/* devcache config --check opens the modules too, to learn their tunables. */
	snprintf(conf, sizeof conf, "%s/devcache.conf", dir);
	FILE *f = fopen(conf, "w");
	assert_non_null(f);
	fprintf(f, "backend_path = %s\n", dir);
	fclose(f);
	log.text[0] = '\0';
	alarm(10);
	assert_int_equal(devcache_config_check_file(conf, capture, &log), 0);
	alarm(0);
	assert_int_equal(unlink(conf), 0);
	assert_int_equal(unlink(fifo), 0);
	assert_int_equal(rmdir(sub), 0);
	assert_int_equal(rmdir(dir), 0);
}

static void module_tunables_are_set_read_and_listed(void **state)
{
	struct captured log;
	devcache_ctx_t *ctx = open_with("log_level:debug,good_depth:5", &log);
	devcache_tunable_desc_t d;
	const char *origin;
	char value[64];
	size_t n = devcache_config_count(ctx), found = 0;

	(void)state;
	assert_int_equal(devcache_config_get(ctx, "good_depth", value, sizeof value, &origin), 0);
	assert_string_equal(value, "5");
	assert_string_equal(origin, "devcache_open");
	assert_int_equal(devcache_config_get(ctx, "good_flavour", value, sizeof value, &origin), 0);
	assert_string_equal(value, "plain");
	assert_string_equal(origin, "default");
	/* The module read its own tunable in init. */
	assert_contains(log.text, "good: good_depth is 5");
	/* Listed after the core's, with the module that declares them; the
	 * malformed module's (badtunable_ok) are not. */
	assert_true(n >= devcache_tunable_count() + 2);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(devcache_config_describe(ctx, i, &d), 0);
		if (i < devcache_tunable_count()) {
			assert_null(d.module);
			continue;
		}
		assert_string_not_equal(d.name, "badtunable_ok");
		if (strcmp(d.name, "good_depth") == 0) {
			assert_string_equal(d.module, "good");
			assert_string_equal(d.type, "int");
			assert_string_equal(d.range, "[1,8]");
			assert_string_equal(d.group, "backends");
			assert_string_equal(d.summary, "How deep the good backend looks");
			found++;
		}
		if (strcmp(d.name, "good_flavour") == 0)
			found++;
	}
	assert_int_equal(found, 2);
	assert_int_equal(devcache_config_describe(ctx, n, &d), DEVCACHE_ENOENT);
	assert_int_equal(devcache_config_describe(NULL, 0, &d), DEVCACHE_EINVAL);
	assert_int_equal(devcache_config_count(NULL), devcache_tunable_count());
	devcache_close(ctx);

	/* A later source overrides an earlier one, as for the core's. */
	ctx = open_with("good_flavour:plain,good_flavour:spicy", NULL);
	assert_int_equal(devcache_config_get(ctx, "good_flavour", value, sizeof value, NULL), 0);
	assert_string_equal(value, "spicy");
	devcache_close(ctx);
}

static void module_tunable_errors_name_source_and_fault(void **state)
{
	(void)state;
	assert_string_equal(open_fails("good_depth:9"),
			    "devcache_open: good_depth: '9' is out of range (accepted: at least 1 and "
			    "at most 8)");
	assert_contains(open_fails("good_flavour:sweet"),
			"devcache_open: good_flavour: invalid enum 'sweet'");
	assert_string_equal(open_fails("good_dept:3"),
			    "devcache_open: unknown tunable 'good_dept' (did you mean 'good_depth'?)");
	assert_string_equal(
		open_fails("nosuch_thing:1"),
		"devcache_open: unknown tunable 'nosuch_thing' (devcache config lists them all)");
}

static void excluded_module_tunables_are_ignored(void **state)
{
	struct captured log;
	devcache_ctx_t *ctx = open_with("log_level:info,backends:^good,good_depth:3", &log);
	char value[64];

	(void)state;
	assert_contains(log.text,
			"devcache_open: good_depth is ignored: the good backend module is not loaded");
	assert_int_equal(devcache_config_get(ctx, "good_depth", value, sizeof value, NULL),
			 DEVCACHE_ENOENT);
	devcache_close(ctx);
}

static void malformed_declaration_refuses_module(void **state)
{
	devcache_ctx_t *ctx = open_with(NULL, NULL);
	devcache_backend_info_t b = backend(ctx, "badtunable");

	(void)state;
	assert_int_equal(b.status, DEVCACHE_BACKEND_UNAVAILABLE);
	assert_contains(b.reason, "malformed declaration: tunable 'good_depth': a module's tunable "
				  "is named badtunable_");
	/* The module is taken with all its tunables or none. */
	char value[64];
	assert_int_equal(devcache_config_get(ctx, "badtunable_ok", value, sizeof value, NULL),
			 DEVCACHE_ENOENT);
	devcache_close(ctx);
}

static void priority_orders_modules_and_minor_versions_load(void **state)
{
	devcache_ctx_t *ctx = open_with(NULL, NULL);
	devcache_backend_info_t b;

	(void)state;
	/* nodevice (60) before good (50) before the rest (0), by name; the
	 * modules that could not be opened come last. */
	const char *order[] = {"host", "nodevice", "good", "failinit", "missing", "newminor",
			       "vmm"};
	for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
		assert_int_equal(devcache_backend_info(ctx, i, &b), 0);
		assert_string_equal(b.name, order[i]);
	}
	b = backend(ctx, "newminor");
	assert_int_equal(b.status, DEVCACHE_BACKEND_LOADED);
	assert_int_equal(b.device_count, 1);
	/* Devices come in the same order. */
	devcache_device_t *dev;
	devcache_device_info_t info;
	assert_int_equal(devcache_device_at(ctx, 1, &dev), 0);
	assert_int_equal(devcache_device_info(dev, &info), 0);
	assert_string_equal(info.id, "good:0");
	/* The DLPack device type a module declares reaches the device's
	 * info where its ABI minor has the entry (2 and later), and only
	 * there: good is built for minor 1. */
	assert_int_equal(info.dlpack_device_type, 0);
	assert_int_equal(devcache_device_at(ctx, 0, &dev), 0);
	assert_int_equal(devcache_device_info(dev, &info), 0);
	assert_string_equal(info.id, "host");
	assert_int_equal(info.dlpack_device_type, 1);
	assert_int_equal(devcache_device_at(ctx, 3, &dev), 0);
	assert_int_equal(devcache_device_info(dev, &info), 0);
	assert_string_equal(info.id, "newminor:0");
	assert_int_equal(info.dlpack_device_type, 7);
	devcache_close(ctx);
	/* The backends tunable's order wins over priorities. */
	ctx = open_with("backends:[vmm,good]", NULL);
	assert_int_equal(devcache_backend_info(ctx, 1, &b), 0);
	assert_string_equal(b.name, "vmm");
	devcache_close(ctx);
}

static void check_file_knows_module_tunables(void **state)
{
	char path[] = "/tmp/devcache-modtun-XXXXXX";
	int fd = mkstemp(path);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	struct captured log = {{0}};

	(void)state;
	assert_non_null(f);
	fprintf(f, "backend_path = %s\ngood_depth = 4\ngood_flavour = sweet\nnosuch_x = 1\n",
		test_env("TEST_MODULES"));
	fclose(f);
	assert_int_equal(devcache_config_check_file(path, capture, &log), DEVCACHE_ECONFIG);
	assert_contains(log.text, ":3: good_flavour: invalid enum 'sweet'");
	assert_contains(log.text, ":4: unknown tunable 'nosuch_x'");
	assert_null(strstr(log.text, "good_depth"));
	assert_contains(devcache_last_error(), ":3: good_flavour");
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "backend_path = %s\ngood_depth = 4\n", test_env("TEST_MODULES"));
	fclose(f);
	assert_int_equal(devcache_config_check_file(path, capture, &log), 0);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(each_module_gets_its_verdict),
		cmocka_unit_test(reasons_stay_quiet_by_default),
		cmocka_unit_test(devices_are_named_and_described),
		cmocka_unit_test(device_lookup_errors_say_why),
		cmocka_unit_test(backends_tunable_selects_and_orders),
		cmocka_unit_test(backends_tunable_excludes),
		cmocka_unit_test(named_but_absent_is_reported),
		cmocka_unit_test(host_cannot_be_excluded),
		cmocka_unit_test(first_directory_wins_and_missing_ones_are_skipped),
		cmocka_unit_test(no_module_directory_leaves_host),
		cmocka_unit_test(modules_that_are_not_regular_files_are_refused),
		cmocka_unit_test(module_tunables_are_set_read_and_listed),
		cmocka_unit_test(module_tunable_errors_name_source_and_fault),
		cmocka_unit_test(excluded_module_tunables_are_ignored),
		cmocka_unit_test(malformed_declaration_refuses_module),
		cmocka_unit_test(priority_orders_modules_and_minor_versions_load),
		cmocka_unit_test(check_file_knows_module_tunables),
	};
	return RUN_TAP(tests);
}
