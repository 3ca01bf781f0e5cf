/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-fault-matrix-hip.c - every HIP call of the workload failed in turn, on the fake ROCm 5.2 and 6. */
#include "tap.h"

#include <stddef.h>

#include "fault-matrix.h"

static const struct tolerated hip_tolerated[] = {
	{"hipRuntimeGetVersion", "open",
	 "it names the virtual-memory ABI: a runtime that cannot say is taken not to map memory"},
	{"hipDeviceGetAttribute", "open",
	 "asked only whether the device maps memory: ROCm 5.2 cannot say, and is asked the next"},
	{"hipMemGetAllocationGranularity", "open",
	 "the same probe: a device that cannot say is taken not to map memory"},
	{"hipDeviceGetPCIBusId", "open", "a device that cannot say has no bus id, as one off PCI"},
	{"hipSetDevice", "free", WAITS},
	{"hipEventCreateWithFlags", "free", WAITS},
	{"hipEventRecord", "free", WAITS},
	{NULL, NULL, NULL},
};
static const char *const hip_releases[] = {
	"hipFree", "hipHostFree", "hipStreamDestroy", "hipEventDestroy", "hipHostUnregister",
	"hipMemRelease", "hipMemUnmap", "hipMemAddressFree", NULL,
};

static const struct tolerated hip_unfailed[] = {
	{"hipGetErrorString", NULL, "returns a string: the API gives it no way to fail"},
	{"hipGetErrorName", NULL, "returns a string: the API gives it no way to fail"},
	{NULL, NULL, NULL},
};

const struct vendor vendors[] = {
	{"hip", "hip:0", "libfake-hip.so", 700 /* hipErrorIllegalAddress */, hip_tolerated,
	 hip_releases, 3 /* a mapping, its memory, its address range */, no_describers,
	 hip_unfailed},
	/* The same module on the fake ROCm 6, whose hipMemAllocationProp is
	 * laid out otherwise: its virtual-memory paths fail cleanly too. */
	{"hip", "hip:0", "libfake-hip6.so", 700 /* hipErrorIllegalAddress */, hip_tolerated,
	 hip_releases, 3 /* a mapping, its memory, its address range */, no_describers,
	 hip_unfailed},
};
const size_t n_vendors = sizeof vendors / sizeof *vendors;

/* On the fake ROCm 5.2, and with expandable segments on the fake ROCm 6
 * as well. */
static const struct matrix matrices[] = {
	{&vendors[0], ""},
	{&vendors[0], ",expandable_segments:True"},
	{&vendors[0], ",load_workers:2"},
	{&vendors[1], ",expandable_segments:True"},
};

MATRIX(every_hip_call_fails_cleanly, 0)
MATRIX(every_hip_call_fails_cleanly_with_expandable_segments, 1)
MATRIX(every_hip_call_fails_cleanly_with_two_load_workers, 2)
MATRIX(every_rocm6_hip_call_fails_cleanly_with_expandable_segments, 3)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(every_hip_call_fails_cleanly, setup, teardown),
		cmocka_unit_test_setup_teardown(
			every_hip_call_fails_cleanly_with_expandable_segments, setup, teardown),
		cmocka_unit_test_setup_teardown(every_hip_call_fails_cleanly_with_two_load_workers,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			every_rocm6_hip_call_fails_cleanly_with_expandable_segments, setup, teardown),
		cmocka_unit_test(every_call_site_of_the_backend_is_failed),
	};

	small_devices();
	return RUN_TAP(tests);
}
