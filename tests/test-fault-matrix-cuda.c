/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-fault-matrix-cuda.c - every CUDA driver call of the workload failed in turn, on the fake CUDA. */
#include "tap.h"

#include <stddef.h>

#include "fault-matrix.h"

static const struct tolerated cuda_tolerated[] = {
	{"cuDriverGetVersion", "open", "read for a debug message only"},
	{"cuDeviceGetPCIBusId", "open", "a device that cannot say has no bus id, as one off PCI"},
	{"cuDeviceGetAttribute", "open",
	 "asked only whether the device maps memory: one that cannot say is taken not to"},
	{"cuMemGetAllocationGranularity", "open", "the same probe"},
	{"cuCtxGetCurrent", "free", WAITS},
	{"cuEventCreate", "free", WAITS},
	{"cuEventRecord", "free", WAITS},
	{NULL, NULL, NULL},
};
static const char *const cuda_releases[] = {
	"cuMemFree_v2", "cuMemFreeHost", "cuStreamDestroy_v2", "cuEventDestroy_v2",
	"cuDevicePrimaryCtxRelease_v2", "cuMemRelease", "cuMemUnmap", "cuMemAddressFree",
	"cuMemHostUnregister", NULL,
};

static const char *const cuda_describers[] = {"cuGetErrorString", "cuGetErrorName", NULL};

const struct vendor vendors[] = {
	{"cuda", "cuda:0", "libfake-cuda.so", 700 /* CUDA_ERROR_ILLEGAL_ADDRESS */, cuda_tolerated,
	 cuda_releases, 3 /* a mapping, its memory, its address range */, cuda_describers, none},
};
const size_t n_vendors = sizeof vendors / sizeof *vendors;

static const struct matrix matrices[] = {
	{&vendors[0], ""},
	{&vendors[0], ",expandable_segments:True"},
	{&vendors[0], ",load_workers:2"},
};

MATRIX(every_cuda_call_fails_cleanly, 0)
MATRIX(every_cuda_call_fails_cleanly_with_expandable_segments, 1)
MATRIX(every_cuda_call_fails_cleanly_with_two_load_workers, 2)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(every_cuda_call_fails_cleanly, setup, teardown),
		cmocka_unit_test_setup_teardown(
			every_cuda_call_fails_cleanly_with_expandable_segments, setup, teardown),
		cmocka_unit_test_setup_teardown(every_cuda_call_fails_cleanly_with_two_load_workers,
						setup, teardown),
		cmocka_unit_test(every_call_site_of_the_backend_is_failed),
	};

	small_devices();
	return RUN_TAP(tests);
}
