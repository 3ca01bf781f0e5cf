/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-loader.c - the backend loader against test-only modules: good, wrong ABI, missing entries, failing init. */
#include "tap.h"

#include <stdio.h>

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

	/* host + good:0 + good:1 + vmm:0 + vmm:1 */
	assert_int_equal(devcache_device_count(ctx), 5);
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
	assert_contains(devcache_last_error(), "the good backend has 2 device(s)");
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
	/* host + vmm:0 + vmm:1 */
	assert_int_equal(devcache_device_count(ctx), 3);
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
	};
	return RUN_TAP(tests);
}
