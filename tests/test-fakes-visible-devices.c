/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-fakes-visible-devices.c - the fake runtimes apply CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES and ZE_AFFINITY_MASK as the vendors document; the backends number what a runtime shows from 0, in its order. */
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spawn.h"

struct vendor {
	const char *backend, *fake, *devices_var, *name; /* name: the fake's, before the ordinal */
};

static const struct vendor cuda = {"cuda", "libfake-cuda.so", "FAKE_CUDA_DEVICES", "Fake CUDA device"};
static const struct vendor hip = {"hip", "libfake-hip.so", "FAKE_HIP_DEVICES", "Fake HIP device"};
static const struct vendor ze = {"ze", "libfake-ze.so", "FAKE_ZE_DEVICES", "Fake Level Zero device"};

static struct result r;

/*
 * The choosing is the vendor runtime's: the library reads none of these
 * variables, so what is checked here is first that the fakes choose as the
 * real runtimes do (the other tests rely on them), and then the library's
 * own part, that each backend lists the devices its runtime shows as
 * NAME:0, NAME:1, ... in the runtime's order, and none more.
 */

/* Whether the backend's module is in one of the folders of TEST_BACKENDS:
 * its fake alone may be a stale one, left by another configuration. */
static int module_built(const char *dirs, const char *backend)
{
	char path[4200];

	for (const char *d = dirs; *d;) {
		size_t n = strcspn(d, ":");

		snprintf(path, sizeof path, "%.*s/%s.so", (int)n, d, backend);
		if (access(path, R_OK) == 0)
			return 1;
		d += n + (d[n] == ':');
	}
	return 0;
}

/* Runs `devcache info` on the vendor's fake with three physical devices and
 * the given variable setting ("NAME=VALUE", or "-NAME" for unset), and
 * checks that the devices listed are the physical ones in want, in that
 * order (-1 ends the list). */
static void check(const struct vendor *v, const char *setting, const int *want)
{
	char opts[8192], fake[4096], devices[64], expect[256];
	const char *dirs = test_env("TEST_BACKENDS");
	int n = 0;

	snprintf(fake, sizeof fake, "%s/%s", test_env("TEST_FAKES"), v->fake);
	if (!module_built(dirs, v->backend) || access(fake, R_OK) != 0)
		skip_because("the %s backend is not built (configure found no headers for it)",
			     v->backend);
	snprintf(opts, sizeof opts, "DEVCACHE_OPTIONS=backend_path:%s,backends:%s,%s_library:%s", dirs,
		 v->backend, v->backend, fake);
	snprintf(devices, sizeof devices, "%s=3", v->devices_var);
	/* The other vendors' variables never leak in from the test's environment. */
	const char *env[] = {"LANGUAGE=C", "LC_ALL=C", opts, devices, "-CUDA_VISIBLE_DEVICES",
			     "-HIP_VISIBLE_DEVICES", "-ROCR_VISIBLE_DEVICES", "-ZE_AFFINITY_MASK",
			     setting, NULL};
	const char *args[] = {"info", NULL};

	spawn_tool(&r, env, args);
	assert_int_equal(r.status, 0);
	const char *listed = strstr(r.out, "\nDevices:\n");
	assert_non_null(listed);
	for (; want[n] >= 0; n++) {
		char id[32];

		snprintf(id, sizeof id, "%s:%d", v->backend, n);
		snprintf(expect, sizeof expect, "  %-10s %s %d\n", id, v->name, want[n]);
		const char *at = strstr(listed, expect);
		if (!at)
			fail_msg("%s: expected \"%s\" after the last device in:\n%s", setting, expect,
				 r.out);
		listed = at + strlen(expect);
	}
	snprintf(expect, sizeof expect, "  %s:%d ", v->backend, n);
	if (strstr(r.out, expect))
		fail_msg("%s: more than %d %s device(s) in:\n%s", setting, n, v->backend, r.out);
	snprintf(expect, sizeof expect, "loaded, %d device%s", n, n == 1 ? "" : "s");
	assert_contains(r.out, expect);
}

#define LIST(...) ((const int[]){__VA_ARGS__, -1})
#define NONE ((const int[]){-1})

static void fake_cuda_reads_cuda_visible_devices(void **state)
{
	(void)state;
	check(&cuda, "-CUDA_VISIBLE_DEVICES", LIST(0, 1, 2));
	check(&cuda, "CUDA_VISIBLE_DEVICES=1", LIST(1));
	check(&cuda, "CUDA_VISIBLE_DEVICES=2,0", LIST(2, 0));
	/* The first entry that names no device ends the list. */
	check(&cuda, "CUDA_VISIBLE_DEVICES=0,7,1", LIST(0));
	check(&cuda, "CUDA_VISIBLE_DEVICES=x,1", NONE);
	check(&cuda, "CUDA_VISIBLE_DEVICES=-1", NONE);
	/* Set and empty: no device at all. */
	check(&cuda, "CUDA_VISIBLE_DEVICES=", NONE);
	assert_contains(r.out, "CUDA_ERROR_NO_DEVICE");
	/* A UUID, or enough of one to name a single device; the fake's are
	 * facec0da-0P..., P the physical ordinal. */
	check(&cuda, "CUDA_VISIBLE_DEVICES=GPU-facec0da-02", LIST(2));
	check(&cuda, "CUDA_VISIBLE_DEVICES=GPU-FACEC0DA-01,0", LIST(1, 0));
	/* A prefix that names every device names none, and ends the list. */
	check(&cuda, "CUDA_VISIBLE_DEVICES=1,GPU-facec0da,0", LIST(1));
	/* A device named twice hides them all, as the driver does. */
	check(&cuda, "CUDA_VISIBLE_DEVICES=0,1,0", NONE);
}

static void fake_hip_reads_hip_visible_devices(void **state)
{
	(void)state;
	check(&hip, "-HIP_VISIBLE_DEVICES", LIST(0, 1, 2));
	check(&hip, "HIP_VISIBLE_DEVICES=2,0", LIST(2, 0));
	check(&hip, "HIP_VISIBLE_DEVICES=1,x,0", LIST(1));
	/* ROCm reads CUDA_VISIBLE_DEVICES where HIP_VISIBLE_DEVICES is not set. */
	check(&hip, "CUDA_VISIBLE_DEVICES=1", LIST(1));
}

static void fake_ze_reads_ze_affinity_mask(void **state)
{
	(void)state;
	check(&ze, "-ZE_AFFINITY_MASK", LIST(0, 1, 2));
	check(&ze, "ZE_AFFINITY_MASK=1", LIST(1));
	/* A set of root devices: their order stays the driver's. */
	check(&ze, "ZE_AFFINITY_MASK=2,0", LIST(0, 2));
	/* A sub-device selects its root device here (the fakes have none). */
	check(&ze, "ZE_AFFINITY_MASK=1.0", LIST(1));
	check(&ze, "ZE_AFFINITY_MASK=5", NONE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fake_cuda_reads_cuda_visible_devices),
		cmocka_unit_test(fake_hip_reads_hip_visible_devices),
		cmocka_unit_test(fake_ze_reads_ze_affinity_mask),
	};

	return RUN_TAP(tests);
}
