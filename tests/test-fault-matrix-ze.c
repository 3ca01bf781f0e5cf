/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-fault-matrix-ze.c - every Level Zero call of the workload failed in turn, on the fake loader. */
#include "tap.h"

#include <stddef.h>

#include "fault-matrix.h"

static const struct tolerated ze_tolerated[] = {
	{"zeDevicePciGetPropertiesExt", "open", "a device that cannot say has no bus id"},
	{"zeDeviceGetCommandQueueGroupProperties", "open",
	 "copies then go to the first queue group, which every device has"},
	{"zeEventCreate", "free", WAITS},
	{"zeEventHostReset", "free", WAITS},
	{"zeCommandListAppendBarrier", "free", WAITS},
	{NULL, NULL, NULL},
};
static const char *const ze_releases[] = {
	"zeMemFree", "zeContextDestroy", "zeCommandListDestroy", "zeEventPoolDestroy",
	"zeEventDestroy", "zePhysicalMemDestroy", "zeVirtualMemFree", "zeVirtualMemUnmap", NULL,
};

const struct vendor vendors[] = {
	{"ze", "ze:0", "libfake-ze.so", 0x70000001 /* ZE_RESULT_ERROR_DEVICE_LOST */, ze_tolerated,
	 ze_releases, 3 /* an event, its pool, their context */, no_describers, none},
};
const size_t n_vendors = sizeof vendors / sizeof *vendors;

static const struct matrix matrices[] = {
	{&vendors[0], ""},
	{&vendors[0], ",expandable_segments:True"},
	{&vendors[0], ",load_workers:2"},
};

MATRIX(every_ze_call_fails_cleanly, 0)
MATRIX(every_ze_call_fails_cleanly_with_expandable_segments, 1)
MATRIX(every_ze_call_fails_cleanly_with_two_load_workers, 2)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(every_ze_call_fails_cleanly, setup, teardown),
		cmocka_unit_test_setup_teardown(
			every_ze_call_fails_cleanly_with_expandable_segments, setup, teardown),
		cmocka_unit_test_setup_teardown(every_ze_call_fails_cleanly_with_two_load_workers,
						setup, teardown),
		cmocka_unit_test(every_call_site_of_the_backend_is_failed),
	};

	small_devices();
	return RUN_TAP(tests);
}
