/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-cuda.c - a host-memory stand-in for libcuda.so.1, with test controls, for the CUDA backend's tests. */
#define _GNU_SOURCE /* twalk_r, secure_getenv, memfd_create, MAP_FIXED_NOREPLACE, strchrnul */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <search.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fake-controls.h"
#include "fake-registry.h"
#include "fake-vmm.h"

/* Everything not static is the driver's API or a test control, and must stay
 * reachable by dlsym() whatever -fvisibility the build uses. */
#pragma GCC visibility push(default)

#include <cuda.h>

/* cuda.h renames most entry points to their newest version (cuMemAlloc is
 * cuMemAlloc_v2), so the definitions below export the names libcuda exports.
 * The driver keeps the first cuDeviceGetUuid beside cuDeviceGetUuid_v2. */
#undef cuDeviceGetUuid
CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);

/* Test controls, reached with dlsym() by tests that dlopen() this library. */
#define FAKE_CUDA_FAIL_ON FAKE_CONTROLS_FAIL_ON
void fake_cuda_fail(const char *function, unsigned nth, int error);
unsigned long fake_cuda_calls(const char *function);
const char *fake_cuda_function(unsigned i);
unsigned long fake_cuda_misuses(const char *function);
size_t fake_cuda_live(void);
void fake_cuda_hold_events(int hold);
void fake_cuda_context_current(int dev);

/* Every function of the driver that this fake provides, in one list: the
 * call counters and fault injection are indexed by it. */
#define FAKE_CUDA_FUNCTIONS(X)                                                                     \
	X(cuGetErrorString)                                                                        \
	X(cuGetErrorName)                                                                          \
	X(cuInit)                                                                                  \
	X(cuDriverGetVersion)                                                                      \
	X(cuDeviceGetCount)                                                                        \
	X(cuDeviceGet)                                                                             \
	X(cuDeviceGetName)                                                                         \
	X(cuDeviceTotalMem)                                                                        \
	X(cuDeviceGetPCIBusId)                                                                     \
	X(cuDeviceGetAttribute)                                                                    \
	X(cuDeviceGetUuid)                                                                         \
	X(cuDeviceGetUuid_v2)                                                                      \
	X(cuDevicePrimaryCtxRetain)                                                                \
	X(cuDevicePrimaryCtxRelease)                                                               \
	X(cuCtxSetCurrent)                                                                         \
	X(cuCtxGetCurrent)                                                                         \
	X(cuCtxGetDevice)                                                                          \
	X(cuCtxPushCurrent)                                                                        \
	X(cuCtxPopCurrent)                                                                         \
	X(cuCtxSynchronize)                                                                        \
	X(cuMemGetInfo)                                                                            \
	X(cuMemAlloc)                                                                              \
	X(cuMemFree)                                                                               \
	X(cuMemAllocHost)                                                                          \
	X(cuMemHostAlloc)                                                                          \
	X(cuMemFreeHost)                                                                           \
	X(cuMemHostRegister)                                                                       \
	X(cuMemHostUnregister)                                                                     \
	X(cuMemHostGetDevicePointer)                                                               \
	X(cuMemcpyHtoD)                                                                            \
	X(cuMemcpyDtoH)                                                                            \
	X(cuMemcpyHtoDAsync)                                                                       \
	X(cuMemcpyDtoHAsync)                                                                       \
	X(cuStreamCreate)                                                                          \
	X(cuStreamDestroy)                                                                         \
	X(cuStreamSynchronize)                                                                     \
	X(cuStreamQuery)                                                                           \
	X(cuStreamWaitValue32)                                                                     \
	X(cuEventCreate)                                                                           \
	X(cuEventDestroy)                                                                          \
	X(cuEventRecord)                                                                           \
	X(cuEventQuery)                                                                            \
	X(cuEventSynchronize)                                                                      \
	X(cuMemGetAllocationGranularity)                                                           \
	X(cuMemAddressReserve)                                                                     \
	X(cuMemAddressFree)                                                                        \
	X(cuMemCreate)                                                                             \
	X(cuMemRelease)                                                                            \
	X(cuMemMap)                                                                                \
	X(cuMemUnmap)                                                                              \
	X(cuMemSetAccess)                                                                          \
	X(cuIpcGetMemHandle)                                                                       \
	X(cuIpcOpenMemHandle)                                                                      \
	X(cuIpcCloseMemHandle)

/* Two levels, so that the header's renaming applies before # does: the
 * names the tests give are the exported ones, "cuMemAlloc_v2". */
#define STR_(s) #s
#define STR(s) STR_(s)

#define X(name) F_##name,
enum { FAKE_CUDA_FUNCTIONS(X) F_COUNT };
#undef X
#define X(name) STR(name),
static const char *const function_names[F_COUNT] = {FAKE_CUDA_FUNCTIONS(X)};
#undef X

static struct fake_counter counters[F_COUNT];

/* cuMemAlloc's documented alignment; the backend may count on it. */
#define DEVICE_ALIGN 256
/* The one granularity of the virtual memory functions, minimum and
 * recommended alike, as on current NVIDIA GPUs. */
#define VM_GRANULARITY ((size_t)2 << 20)
/* Devices are bits of a uint64_t in a mapping's access masks. */
#define MAX_DEVICES 64
/* The driver's context stack has no set depth; a test that needs more than
 * this is pushing in a loop. */
#define CTX_STACK_DEPTH 32

/* Read once, at the first cuInit, as the driver reads its environment. */
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;
static int n_physical;
static int n_visible;
static int visible[MAX_DEVICES];     /* visible ordinal (a CUdevice) -> physical ordinal */
static size_t capacity;              /* bytes of each device */
static size_t used[MAX_DEVICES];     /* by physical ordinal; under lock */
static int vmm_supported;
/* FAKE_CUDA_COPY_MS: each copy to or from a device takes this long, as a
 * slow link would (for what shows progress over time: the tool's bar). */
static long copy_ms;
static int initialized;              /* a cuInit succeeded */
static int hold_events;

/* The per-thread context stack, as in the driver; the top is current. */
static __thread CUcontext ctx_stack[CTX_STACK_DEPTH];
static __thread int ctx_depth;

/* The live objects, all under lock: one tree of non-overlapping address ranges
 * (device and host allocations, registrations, reservations) so that any
 * address inside one finds it, one tree each of the stream and event handles,
 * and in vmem the mappings inside reservations and the physical memory handles. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *ranges;
static void *streams;
static void *events;

enum range_kind { R_DEVICE, R_HOST, R_REGISTERED, R_RESERVED, R_MAPPED, R_KINDS };
static const char *const kind_names[R_KINDS] = {"device allocation", "host allocation",
						"host registration", "address reservation",
						"mapping"};
_Static_assert(R_KINDS <= FAKE_REGISTRY_KINDS, "the registry counts every kind");
static struct fake_registry registry = {
	.fake = "fake-cuda",
	.leaks_env = "FAKE_CUDA_LEAKS",
	.kind_names = kind_names,
	.n_kinds = R_KINDS,
};
static unsigned long live_streams, live_events;
static struct fake_vmm vmem =
	FAKE_VMM_INIT(&lock, &registry, &ranges, R_RESERVED, R_MAPPED, "fake-cuda-physical");

/* A primary context per visible device; its handle stays the same across
 * release and retain, as the driver's does. */
struct CUctx_st {
	int dev;       /* visible ordinal */
	unsigned refs; /* under lock; 0: inactive, "destroyed" */
};
static struct CUctx_st primaries[MAX_DEVICES];

/* Physical memory's device (a struct fake_physical's) is a visible ordinal;
 * mappings are struct fake_mapping, in vmem.mappings. */
struct range {
	struct fake_range span; /* first, for the registry; its kind is an enum range_kind */
	size_t mapped; /* host allocations and reservations: the length given to mmap() */
	int dev;       /* device allocations and reservations: visible ordinal */
};

/* A wait on a 32-bit word (cuStreamWaitValue32): what the stream's later
 * work waits for.  addr NULL: none. */
struct word_wait {
	const uint32_t *addr;
	uint32_t value;
	unsigned op; /* CU_STREAM_WAIT_VALUE_GEQ, _EQ, _AND, _NOR */
};

struct CUstream_st {
	int dev;
	unsigned flags;
	struct word_wait wait; /* under lock */
};

struct CUevent_st {
	struct fake_event held; /* first, for the walks over held events; stream is a CUstream */
	unsigned flags;
	struct word_wait wait;  /* the stream's, unmet when recorded; under lock */
};

_Static_assert(sizeof(struct fake_ipc_handle) <= sizeof(CUipcMemHandle), "IPC handle too large");
static const char ipc_magic[8] = "fakecu";

/* ---- errors ---- */

/* Names and texts as the driver's cuGetErrorName and cuGetErrorString give them. */
#define ERR(code, text) {code, #code, text}
static const struct fake_code error_table[] = {
	ERR(CUDA_SUCCESS, "no error"),
	ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
	ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
	ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
	ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
	ERR(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
	ERR(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
	ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
	ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
	ERR(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
	ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
	ERR(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
	ERR(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
	ERR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
	ERR(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
	ERR(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
	ERR(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"),
	ERR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
	ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
	ERR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
	ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
	ERR(CUDA_ERROR_NOT_READY, "device not ready"),
	ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
	ERR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
	ERR(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
	ERR(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
	ERR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
	ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
	ERR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
	    "part or all of the requested memory range is already mapped"),
	ERR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
	    "pointer does not correspond to a registered memory region"),
	ERR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
	ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
	ERR(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
	ERR(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
	    "system has unsupported display driver / cuda driver combination"),
	ERR(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
	ERR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef ERR

/* ---- call counting and fault injection ---- */

static const struct fake_controls controls =
	FAKE_CONTROLS_INIT(cuda, CUDA, "error", INT_MAX, function_names, counters, error_table);

FAKE_CONTROLS_EXPORTS(cuda, controls)

_Static_assert(CUDA_SUCCESS == 0, "fake_controls_enter answers 0 for success");

FAKE_CONTROLS_CALLS(CUresult, controls)

/* Returns what expr returns, unless that is success. */
#define TRY(expr)                                                                                  \
	do {                                                                                       \
		CUresult try_ = (expr);                                                            \
		if (try_ != CUDA_SUCCESS)                                                          \
			return try_;                                                               \
	} while (0)

/* For the few functions the driver answers before cuInit: counted, maybe
 * failed on demand. The name is pasted at once, before the header's renaming
 * could apply to it. */
#define ENTER_ANYTIME(name) TRY(enter(F_##name))

/* Each other API function begins with this; as the driver documents, it is
 * refused before a successful cuInit. */
#define ENTER(name)                                                                                \
	do {                                                                                       \
		TRY(enter(F_##name));                                                              \
		if (F_##name != F_cuInit && !__atomic_load_n(&initialized, __ATOMIC_ACQUIRE))      \
			return misuse(CUDA_ERROR_NOT_INITIALIZED);                                 \
	} while (0)

__attribute__((constructor)) static void fake_cuda_load(void)
{
	fake_controls_load(&controls);
}

/* ---- devices ---- */

/* A fixed UUID per physical ordinal; the byte after the fixed four is the
 * ordinal, so "GPU-facec0da-01" names physical device 1 unambiguously. */
static void uuid_of(int phys, unsigned char bytes[16])
{
	static const unsigned char head[4] = {0xfa, 0xce, 0xc0, 0xda};

	memcpy(bytes, head, sizeof head);
	bytes[4] = (unsigned char)phys;
	for (int i = 5; i < 16; i++)
		bytes[i] = (unsigned char)(phys * 37 + i * 11);
}

/* "GPU-" and the 16 bytes in hex, dashed as nvidia-smi shows them. */
static void uuid_text(int phys, char text[41])
{
	unsigned char b[16];
	char *p = text + 4;

	uuid_of(phys, b);
	memcpy(text, "GPU-", 4);
	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*p++ = '-';
		p += sprintf(p, "%02x", b[i]);
	}
}

/* The physical device one CUDA_VISIBLE_DEVICES entry names, or -1. A number
 * is read as strtoul would, so that "1gpu" is 1; "GPU-" starts a UUID, of
 * which a prefix naming one device is enough. The fake has no MIG devices. */
static int visible_entry(const char *s, size_t len)
{
	char text[41];
	int found = -1;
	long v = 0;

	while (len && (*s == ' ' || *s == '\t')) {
		s++;
		len--;
	}
	if (len >= 4 && strncmp(s, "GPU-", 4) == 0) {
		if (len > 40)
			return -1;
		for (int p = 0; p < n_physical; p++) {
			uuid_text(p, text);
			if (strncasecmp(s, text, len) != 0)
				continue;
			if (found >= 0)
				return -1; /* ambiguous */
			found = p;
		}
		return found;
	}
	if (!len || *s < '0' || *s > '9')
		return -1;
	for (; len && *s >= '0' && *s <= '9'; s++, len--)
		if ((v = v * 10 + (*s - '0')) >= n_physical)
			return -1;
	return (int)v;
}

/* CUDA_VISIBLE_DEVICES as the driver reads it: comma-separated entries,
 * enumerated in the order given; the first invalid entry (not a device,
 * out of range, an ambiguous UUID prefix) ends the list, and the devices
 * before it stay visible. A device named twice hides every device: the
 * driver then finds none, and cuInit fails with CUDA_ERROR_NO_DEVICE. That
 * is the behaviour PyTorch reproduces without initializing CUDA, in
 * _parse_visible_devices ("Repeated ordinal results in empty set") and
 * _transform_uuid_to_ordinals ("Duplicates result in empty set"). */
static void parse_visible(const char *list)
{
	const char *p = list;

	n_visible = 0;
	for (;;) {
		const char *end = strchrnul(p, ',');
		int phys = visible_entry(p, (size_t)(end - p));

		if (phys < 0)
			return;
		for (int i = 0; i < n_visible; i++)
			if (visible[i] == phys) {
				n_visible = 0;
				return;
			}
		visible[n_visible++] = phys;
		if (!*end)
			return;
		p = end + 1;
	}
}

static void devices_init(void)
{
	const char *list = getenv("CUDA_VISIBLE_DEVICES");

	n_physical = (int)fake_controls_env_number(&controls, "FAKE_CUDA_DEVICES", 2, 0, MAX_DEVICES);
	capacity = (size_t)fake_controls_env_number(&controls, "FAKE_CUDA_MEMORY_MB", 1024, 0,
						    (long)(SIZE_MAX >> 21)) << 20;
	vmm_supported = (int)fake_controls_env_number(&controls, "FAKE_CUDA_VMM", 1, 0, 1);
	copy_ms = fake_controls_env_number(&controls, "FAKE_CUDA_COPY_MS", 0, 0, 10000);
	/* Set but empty hides every device, as with the driver. */
	if (list) {
		parse_visible(list);
	} else {
		n_visible = n_physical;
		for (int i = 0; i < n_physical; i++)
			visible[i] = i;
	}
	for (int i = 0; i < n_visible; i++)
		primaries[i].dev = i;
}

static CUresult check_device(CUdevice dev)
{
	return dev < 0 || dev >= n_visible ? misuse(CUDA_ERROR_INVALID_DEVICE) : CUDA_SUCCESS;
}

/* ---- the registries ---- */

/* The live range holding address p, under lock; NULL if none. */
static struct range *range_at(uintptr_t p)
{
	return fake_range_in(&ranges, p, 1);
}

static int is_default_stream(CUstream s)
{
	return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

/* Whether s is a live stream (the default ones too), under lock. */
static int stream_known(CUstream s)
{
	return is_default_stream(s) || fake_handle_known(&streams, s);
}

/* ---- contexts ---- */

static CUcontext current_context(void)
{
	return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
}

static int context_known(CUcontext ctx)
{
	uintptr_t p = (uintptr_t)ctx, first = (uintptr_t)primaries;

	return p >= first && p < first + (size_t)n_visible * sizeof *primaries &&
	       (p - first) % sizeof *primaries == 0;
}

/* The device of the calling thread's current context, for the calls that
 * need one; dev_p may be NULL. */
static CUresult current_device(int *dev_p)
{
	CUcontext ctx = current_context();
	unsigned refs;

	if (!ctx)
		return misuse(CUDA_ERROR_INVALID_CONTEXT);
	pthread_mutex_lock(&lock);
	refs = ctx->refs;
	pthread_mutex_unlock(&lock);
	/* Released to nothing, the primary context is gone until retained again. */
	if (!refs)
		return misuse(CUDA_ERROR_CONTEXT_IS_DESTROYED);
	if (dev_p)
		*dev_p = ctx->dev;
	return CUDA_SUCCESS;
}

/* ---- errors, init and versions ---- */

/* An unknown code gives NULL and CUDA_ERROR_INVALID_VALUE, as the driver does. */
static CUresult error_info(CUresult error, const char **pStr, int text)
{
	int i = fake_controls_code_index(&controls, (int)error);

	if (!pStr)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	*pStr = i < 0 ? NULL : text ? error_table[i].text : error_table[i].name;
	/* A code newer than the fake is no misuse. */
	return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	ENTER_ANYTIME(cuGetErrorString);
	return error_info(error, pStr, 1);
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	ENTER_ANYTIME(cuGetErrorName);
	return error_info(error, pStr, 0);
}

/* With no visible device, cuInit fails with CUDA_ERROR_NO_DEVICE, every time,
 * and the other calls keep answering CUDA_ERROR_NOT_INITIALIZED, as the
 * driver does with CUDA_VISIBLE_DEVICES="" (cuDeviceGetCount included). */
CUresult cuInit(unsigned int Flags)
{
	ENTER(cuInit);
	if (Flags != 0)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	pthread_once(&devices_once, devices_init);
	if (n_visible == 0)
		return CUDA_ERROR_NO_DEVICE;
	__atomic_store_n(&initialized, 1, __ATOMIC_RELEASE);
	return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
	ENTER_ANYTIME(cuDriverGetVersion);
	if (!driverVersion)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	*driverVersion = CUDA_VERSION;
	return CUDA_SUCCESS;
}

/* ---- devices ---- */

CUresult cuDeviceGetCount(int *count)
{
	ENTER(cuDeviceGetCount);
	if (!count)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	*count = n_visible;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	ENTER(cuDeviceGet);
	if (!device)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(check_device(ordinal));
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	ENTER(cuDeviceGetName);
	TRY(check_device(dev));
	if (!name || len <= 0)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	/* The physical ordinal in the name lets a test see CUDA_VISIBLE_DEVICES at work. */
	snprintf(name, (size_t)len, "Fake CUDA device %d", visible[dev]);
	return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
	ENTER(cuDeviceTotalMem);
	TRY(check_device(dev));
	if (!bytes)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	*bytes = capacity;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	ENTER(cuDeviceGetPCIBusId);
	TRY(check_device(dev));
	/* Room for all of "dddd:bb:dd.f" and its NUL. */
	if (!pciBusId || len < 13)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", visible[dev] + 1);
	return CUDA_SUCCESS;
}

/* What the fake's devices say of themselves: an H100-like part (compute
 * capability 9.0) on PCI bus P + 1, with unified addressing and host memory
 * registration, and no shareable handles, pools or RDMA. */
static const struct {
	CUdevice_attribute attrib;
	int value;
} attribute_table[] = {
	{CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
	{CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
	{CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
	{CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0},
	{CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0},
	{CU_DEVICE_ATTRIBUTE_INTEGRATED, 0},
	{CU_DEVICE_ATTRIBUTE_TCC_DRIVER, 0},
	{CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
	{CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
	{CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 1},
	{CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1},
	{CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, 1},
	{CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0},
	{CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0},
	{CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0},
};

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	ENTER(cuDeviceGetAttribute);
	TRY(check_device(dev));
	if (!pi)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (attrib == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) {
		*pi = vmm_supported;
		return CUDA_SUCCESS;
	}
	if (attrib == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID) {
		*pi = visible[dev] + 1;
		return CUDA_SUCCESS;
	}
	for (size_t i = 0; i < sizeof attribute_table / sizeof *attribute_table; i++)
		if (attribute_table[i].attrib == attrib) {
			*pi = attribute_table[i].value;
			return CUDA_SUCCESS;
		}
	/* An attribute the fake does not know: asking is no misuse. */
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
	unsigned char b[16];

	TRY(check_device(dev));
	if (!uuid)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	uuid_of(visible[dev], b);
	memcpy(uuid->bytes, b, sizeof uuid->bytes);
	return CUDA_SUCCESS;
}

/* The two differ only for MIG instances, which the fake has none of. */
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	ENTER(cuDeviceGetUuid);
	return device_uuid(uuid, dev);
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	ENTER(cuDeviceGetUuid_v2);
	return device_uuid(uuid, dev);
}

/* ---- contexts ---- */

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	ENTER(cuDevicePrimaryCtxRetain);
	TRY(check_device(dev));
	if (!pctx)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	pthread_mutex_lock(&lock);
	primaries[dev].refs++;
	pthread_mutex_unlock(&lock);
	*pctx = &primaries[dev];
	return CUDA_SUCCESS;
}

/* At 0 the context is inactive: the calls that need it fail until it is
 * retained again. Unlike the driver, which frees what the context held, the
 * fake keeps it, so that the leak report names what the caller forgot. */
CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	CUresult err = CUDA_SUCCESS;

	ENTER(cuDevicePrimaryCtxRelease);
	TRY(check_device(dev));
	pthread_mutex_lock(&lock);
	if (primaries[dev].refs)
		primaries[dev].refs--;
	else
		err = misuse(CUDA_ERROR_INVALID_CONTEXT);
	pthread_mutex_unlock(&lock);
	return err;
}

/* Replaces the top of the stack; NULL pops it, and on an empty stack does nothing. */
CUresult cuCtxSetCurrent(CUcontext ctx)
{
	ENTER(cuCtxSetCurrent);
	if (ctx && !context_known(ctx))
		return misuse(CUDA_ERROR_INVALID_CONTEXT);
	if (ctx_depth == 0) {
		if (ctx)
			ctx_stack[ctx_depth++] = ctx;
	} else if (ctx) {
		ctx_stack[ctx_depth - 1] = ctx;
	} else {
		ctx_depth--;
	}
	return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	ENTER(cuCtxGetCurrent);
	if (!pctx)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	*pctx = current_context();
	return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
	int dev;

	ENTER(cuCtxGetDevice);
	if (!device)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	*device = dev;
	return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx)
{
	ENTER(cuCtxPushCurrent);
	if (!ctx)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (!context_known(ctx))
		return misuse(CUDA_ERROR_INVALID_CONTEXT);
	if (ctx_depth == CTX_STACK_DEPTH)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent(CUcontext *pctx)
{
	ENTER(cuCtxPopCurrent);
	if (ctx_depth == 0)
		return misuse(CUDA_ERROR_INVALID_CONTEXT);
	ctx_depth--;
	if (pctx)
		*pctx = ctx_stack[ctx_depth];
	return CUDA_SUCCESS;
}

/* Copies run at once, so waiting for the device is waiting for held events. */
CUresult cuCtxSynchronize(void)
{
	struct fake_release_filter f = {.dev = -1};

	ENTER(cuCtxSynchronize);
	TRY(current_device(&f.dev));
	fake_events_release(&lock, &events, &f);
	return CUDA_SUCCESS;
}

/* ---- device memory ---- */

CUresult cuMemGetInfo(size_t *free, size_t *total)
{
	int dev;

	ENTER(cuMemGetInfo);
	if (!free || !total)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	pthread_mutex_lock(&lock);
	*free = capacity - used[visible[dev]];
	pthread_mutex_unlock(&lock);
	*total = capacity;
	return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
	struct range *r;
	int dev;

	ENTER(cuMemAlloc);
	if (!dptr || bytesize == 0)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	if ((r = malloc(sizeof *r)))
		*r = (struct range){.dev = dev};
	if (fake_vmm_alloc_device(&vmem, r ? &r->span : NULL, R_DEVICE, bytesize, DEVICE_ALIGN,
				  &used[visible[dev]], capacity, NULL) != FAKE_VMM_OK) {
		free(r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = (CUdeviceptr)r->span.base;
	return CUDA_SUCCESS;
}

/* Removes the range based at p if it is of kind; takes the lock. */
static struct range *take_range(uintptr_t p, enum range_kind kind)
{
	return fake_vmm_take(&vmem, p, kind);
}

/* No context needed: the pointer names its allocation. 0 is freed as
 * nothing, as the driver does. */
CUresult cuMemFree(CUdeviceptr dptr)
{
	struct range *r;

	ENTER(cuMemFree);
	if (!dptr)
		return CUDA_SUCCESS;
	if (!(r = take_range((uintptr_t)dptr, R_DEVICE)))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	free((void *)(uintptr_t)dptr);
	free(r);
	return CUDA_SUCCESS;
}

/* ---- host memory ---- */

#define HOST_ALLOC_FLAGS                                                                           \
	(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED)

/* Page-aligned mmap()ed memory. A size of 0 is refused, as cuMemAlloc
 * documents for device memory. */
static CUresult host_alloc(void **pp, size_t bytesize, unsigned flags)
{
	struct range *r;
	int dev;

	if (!pp || bytesize == 0 || (flags & ~(unsigned)HOST_ALLOC_FLAGS))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	if (!(r = malloc(sizeof *r)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*r = (struct range){.dev = dev};
	if (fake_vmm_alloc_host(&vmem, &r->span, R_HOST, bytesize, &r->mapped) != FAKE_VMM_OK) {
		free(r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pp = (void *)r->span.base;
	return CUDA_SUCCESS;
}

CUresult cuMemAllocHost(void **pp, size_t bytesize)
{
	ENTER(cuMemAllocHost);
	return host_alloc(pp, bytesize, 0);
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	ENTER(cuMemHostAlloc);
	return host_alloc(pp, bytesize, Flags);
}

/* NULL is freed as nothing, as the driver does. */
CUresult cuMemFreeHost(void *p)
{
	struct range *r;

	ENTER(cuMemFreeHost);
	if (!p)
		return CUDA_SUCCESS;
	if (!(r = take_range((uintptr_t)p, R_HOST)))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	munmap(p, r->mapped);
	free(r);
	return CUDA_SUCCESS;
}

/* Whether [p, p + size) is all mapped, and writable unless read_only will
 * do: what the driver can pin. A read-only mapping needs
 * CU_MEMHOSTREGISTER_READ_ONLY, as documented. */
static int host_pinnable(uintptr_t p, size_t size, int read_only)
{
	FILE *maps = fopen("/proc/self/maps", "re");
	uintptr_t end = p + size, start, stop;
	char line[1024], perms[5];

	if (!maps)
		return 1; /* nothing to tell by */
	while (p < end && fgets(line, sizeof line, maps)) {
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %4s", &start, &stop, perms) != 3 ||
		    stop <= p)
			continue;
		if (start > p || (perms[1] != 'w' && !read_only))
			break;
		p = stop;
	}
	fclose(maps);
	return p >= end;
}

#define HOST_REGISTER_FLAGS                                                                        \
	(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |                              \
	 CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)

CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
	struct range *r, *other;
	int dev;

	ENTER(cuMemHostRegister);
	if (!p || bytesize == 0 || (Flags & ~(unsigned)HOST_REGISTER_FLAGS) ||
	    bytesize > UINTPTR_MAX - (uintptr_t)p)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	/* What the driver cannot pin is an invalid argument to it. */
	if (!host_pinnable((uintptr_t)p, bytesize, Flags & CU_MEMHOSTREGISTER_READ_ONLY))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (!(r = malloc(sizeof *r)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*r = (struct range){.span = {.base = (uintptr_t)p, .size = bytesize, .kind = R_REGISTERED},
			    .dev = dev};
	pthread_mutex_lock(&lock);
	other = fake_range_add(&registry, &ranges, &r->span);
	pthread_mutex_unlock(&lock);
	if (other == r)
		return CUDA_SUCCESS;
	free(r);
	if (!other)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* Pinned memory pinned again is the driver's error; device memory is no host memory. */
	return other->span.kind == R_HOST || other->span.kind == R_REGISTERED ?
		       misuse(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) :
		       misuse(CUDA_ERROR_INVALID_VALUE);
}

CUresult cuMemHostUnregister(void *p)
{
	struct range *r;

	ENTER(cuMemHostUnregister);
	if (!p)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (!(r = take_range((uintptr_t)p, R_REGISTERED)))
		return misuse(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	free(r);
	return CUDA_SUCCESS;
}

/* Host memory is mapped into the device's address space at the same
 * address (unified addressing), as on every 64-bit system the driver runs
 * on. */
CUresult cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	struct range *r;
	CUresult err = CUDA_SUCCESS;

	ENTER(cuMemHostGetDevicePointer);
	if (!pdptr || !p || Flags)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	pthread_mutex_lock(&lock);
	r = range_at((uintptr_t)p);
	if (!r || (r->span.kind != R_HOST && r->span.kind != R_REGISTERED))
		err = misuse(CUDA_ERROR_INVALID_VALUE);
	pthread_mutex_unlock(&lock);
	if (err == CUDA_SUCCESS)
		*pdptr = (CUdeviceptr)(uintptr_t)p;
	return err;
}

/* ---- waits on a word in memory ---- */

/* Whether w is met now; a met wait is over, and is cleared.  Under lock. */
static int word_met(struct word_wait *w)
{
	uint32_t v;
	int met;

	if (!w->addr)
		return 1;
	v = __atomic_load_n(w->addr, __ATOMIC_ACQUIRE);
	switch (w->op) {
	case CU_STREAM_WAIT_VALUE_GEQ: met = (int32_t)(v - w->value) >= 0; break;
	case CU_STREAM_WAIT_VALUE_EQ: met = v == w->value; break;
	case CU_STREAM_WAIT_VALUE_AND: met = (v & w->value) != 0; break;
	default: met = ~(v | w->value) != 0; break;
	}
	if (met)
		w->addr = NULL;
	return met;
}

/* Blocks the calling thread until w is met, polling the word every
 * millisecond with the lock released: the fake runs a stream's work when
 * it is queued, so work queued behind an unmet wait waits here.  Under
 * lock. */
static void word_block(struct word_wait *w)
{
	const struct timespec ms = {0, 1000000};

	while (!word_met(w)) {
		pthread_mutex_unlock(&lock);
		nanosleep(&ms, NULL);
		pthread_mutex_lock(&lock);
	}
}

/* ---- copies ---- */

/* Whether device dev may copy [p, p + size) on the device side, under lock:
 * the range must lie in one device allocation, or in a run of adjacent
 * mappings of one reservation. Mapped memory that dev has not been given
 * access to (for reading from, or writing to) faults on a device; here it
 * fails the copy with CUDA_ERROR_ILLEGAL_ADDRESS instead of the fake's own
 * SIGSEGV. */
static CUresult device_side(uintptr_t p, size_t size, int dev, int write)
{
	struct range *r = range_at(p);

	if (!r || (r->span.kind != R_DEVICE && r->span.kind != R_RESERVED) ||
	    size > r->span.base + r->span.size - p)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (r->span.kind == R_DEVICE)
		return CUDA_SUCCESS;
	switch (fake_vmm_reach(&vmem, p, size, dev, write)) {
	case FAKE_VMM_REACHED:
		return CUDA_SUCCESS;
	case FAKE_VMM_DENIED:
		return misuse(CUDA_ERROR_ILLEGAL_ADDRESS);
	default:
		return misuse(CUDA_ERROR_INVALID_VALUE);
	}
}

/* Host memory: pageable memory the fake does not know, or inside one host
 * allocation or registration; never device memory. Under lock. */
static CUresult host_side(uintptr_t p, size_t size)
{
	struct range *r = range_at(p);

	if (!r)
		return CUDA_SUCCESS;
	if ((r->span.kind == R_HOST || r->span.kind == R_REGISTERED) &&
	    size <= r->span.base + r->span.size - p)
		return CUDA_SUCCESS;
	return misuse(CUDA_ERROR_INVALID_VALUE);
}

/* The copy is done before this returns, in the calling thread: work on one
 * stream then completes in order, and is done whenever anyone could wait.
 * It runs under the lock, so that a racing free cannot unmap what it reads. */
static CUresult copy(uintptr_t dst, uintptr_t src, size_t size, int to_device, CUstream stream,
		     int async)
{
	CUresult err = CUDA_SUCCESS;
	int dev;

	TRY(current_device(&dev));
	pthread_mutex_lock(&lock);
	/* Queued behind a wait on a word: done once the wait is over. */
	if (async && stream_known(stream) && !is_default_stream(stream))
		word_block(&stream->wait);
	if (async && !stream_known(stream))
		err = misuse(CUDA_ERROR_INVALID_HANDLE);
	else if (size && (!dst || !src || size > UINTPTR_MAX - dst || size > UINTPTR_MAX - src))
		err = misuse(CUDA_ERROR_INVALID_VALUE);
	else if (size && to_device)
		err = device_side(dst, size, dev, 1);
	else if (size)
		err = device_side(src, size, dev, 0);
	if (err == CUDA_SUCCESS && size)
		err = host_side(to_device ? src : dst, size);
	if (err == CUDA_SUCCESS && size)
		memmove((void *)dst, (const void *)src, size);
	pthread_mutex_unlock(&lock);
	if (copy_ms && err == CUDA_SUCCESS && size)
		nanosleep(&(struct timespec){copy_ms / 1000, copy_ms % 1000 * 1000000}, NULL);
	return err;
}

CUresult cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	ENTER(cuMemcpyHtoD);
	return copy((uintptr_t)dstDevice, (uintptr_t)srcHost, ByteCount, 1, NULL, 0);
}

CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	ENTER(cuMemcpyDtoH);
	return copy((uintptr_t)dstHost, (uintptr_t)srcDevice, ByteCount, 0, NULL, 0);
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
			   CUstream hStream)
{
	ENTER(cuMemcpyHtoDAsync);
	return copy((uintptr_t)dstDevice, (uintptr_t)srcHost, ByteCount, 1, hStream, 1);
}

CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
			   CUstream hStream)
{
	ENTER(cuMemcpyDtoHAsync);
	return copy((uintptr_t)dstHost, (uintptr_t)srcDevice, ByteCount, 0, hStream, 1);
}

/* ---- streams ---- */

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	struct CUstream_st *s;
	int dev;

	ENTER(cuStreamCreate);
	if (!phStream || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	if (!(s = malloc(sizeof *s)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*s = (struct CUstream_st){.dev = dev, .flags = Flags};
	if (!fake_handle_register(&lock, &streams, s, &live_streams))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*phStream = s;
	return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream hStream)
{
	int found;

	ENTER(cuStreamDestroy);
	pthread_mutex_lock(&lock);
	/* The default streams are not the caller's to destroy. */
	found = !is_default_stream(hStream) && fake_handle_remove(&streams, hStream, &live_streams);
	if (found)
		fake_events_forget_stream(&events, hStream);
	pthread_mutex_unlock(&lock);
	if (!found)
		return misuse(CUDA_ERROR_INVALID_HANDLE);
	free(hStream);
	return CUDA_SUCCESS;
}

/* The device whose work stream s orders, under lock: a default stream is the
 * current context's. */
static CUresult stream_device(CUstream s, int *dev_p)
{
	if (!stream_known(s))
		return misuse(CUDA_ERROR_INVALID_HANDLE);
	if (!is_default_stream(s)) {
		*dev_p = s->dev;
		return CUDA_SUCCESS;
	}
	if (!current_context())
		return misuse(CUDA_ERROR_INVALID_CONTEXT);
	if (!current_context()->refs)
		return misuse(CUDA_ERROR_CONTEXT_IS_DESTROYED);
	*dev_p = current_context()->dev;
	return CUDA_SUCCESS;
}

/* Held events recorded on stream: what its work still waits for. */
static CUresult stream_wait(CUstream stream, int release)
{
	struct fake_release_filter f = {.dev = -1};
	CUresult err;

	pthread_mutex_lock(&lock);
	err = stream_device(stream, &f.dev);
	pthread_mutex_unlock(&lock);
	if (err != CUDA_SUCCESS)
		return err;
	f.stream = is_default_stream(stream) ? NULL : stream;
	/* A wait on a word first: the stream's later work is behind it. */
	if (f.stream) {
		pthread_mutex_lock(&lock);
		if (release)
			word_block(&stream->wait);
		else if (!word_met(&stream->wait))
			err = CUDA_ERROR_NOT_READY;
		pthread_mutex_unlock(&lock);
		if (err != CUDA_SUCCESS)
			return err;
	}
	return fake_events_stream_busy(&lock, &events, &f, release, &hold_events) ?
		       CUDA_ERROR_NOT_READY :
		       CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream hStream)
{
	ENTER(cuStreamSynchronize);
	return stream_wait(hStream, 1);
}

CUresult cuStreamQuery(CUstream hStream)
{
	ENTER(cuStreamQuery);
	return stream_wait(hStream, 0);
}

/* The stream's later work waits until the word at addr meets the
 * condition; the word is read where it is (host memory and device memory
 * are both host memory here).  A wait queued behind an unmet one blocks
 * the calling thread until that is met, as a copy would.  The default
 * streams are not held: CUDA_ERROR_NOT_SUPPORTED. */
CUresult cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
			     unsigned int flags)
{
	uintptr_t a = (uintptr_t)addr;
	CUresult err = CUDA_SUCCESS;
	struct range *r;

	ENTER(cuStreamWaitValue32);
	if ((flags & ~(3u | (unsigned)CU_STREAM_WAIT_VALUE_FLUSH)) || !a || a % 4)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	pthread_mutex_lock(&lock);
	r = range_at(a);
	if (!stream_known(stream))
		err = misuse(CUDA_ERROR_INVALID_HANDLE);
	else if (is_default_stream(stream))
		err = CUDA_ERROR_NOT_SUPPORTED;
	else if (!r || r->span.kind == R_RESERVED || a + 4 > r->span.base + r->span.size)
		err = misuse(CUDA_ERROR_INVALID_VALUE);
	if (err == CUDA_SUCCESS) {
		word_block(&stream->wait);
		stream->wait = (struct word_wait){.addr = (const uint32_t *)a, .value = value,
						  .op = flags & 3u};
	}
	pthread_mutex_unlock(&lock);
	return err;
}

/* ---- events ---- */

#define EVENT_FLAGS                                                                                \
	(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	struct CUevent_st *e;
	int dev;

	ENTER(cuEventCreate);
	if (!phEvent || (Flags & ~(unsigned)EVENT_FLAGS))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	/* An interprocess event cannot time, as documented. */
	if (Flags & CU_EVENT_INTERPROCESS && !(Flags & CU_EVENT_DISABLE_TIMING))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	if (!(e = malloc(sizeof *e)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*e = (struct CUevent_st){.held.dev = dev, .flags = Flags};
	if (!fake_handle_register(&lock, &events, e, &live_events))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*phEvent = e;
	return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent hEvent)
{
	int found;

	ENTER(cuEventDestroy);
	pthread_mutex_lock(&lock);
	found = fake_handle_remove(&events, hEvent, &live_events);
	pthread_mutex_unlock(&lock);
	if (!found)
		return misuse(CUDA_ERROR_INVALID_HANDLE);
	free(hEvent);
	return CUDA_SUCCESS;
}

/* The event and the stream must be of one context, as documented: here,
 * of one device, since each device has only its primary context. */
CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	CUresult err;
	int dev;

	ENTER(cuEventRecord);
	pthread_mutex_lock(&lock);
	err = fake_handle_known(&events, hEvent) ? stream_device(hStream, &dev) :
						   misuse(CUDA_ERROR_INVALID_HANDLE);
	if (err == CUDA_SUCCESS && dev != hEvent->held.dev)
		err = misuse(CUDA_ERROR_INVALID_HANDLE);
	if (err == CUDA_SUCCESS) {
		hEvent->held.pending = __atomic_load_n(&hold_events, __ATOMIC_RELAXED) != 0;
		hEvent->held.stream = is_default_stream(hStream) ? NULL : hStream;
		hEvent->wait = (struct word_wait){0};
		if (hEvent->held.stream && !word_met(&hStream->wait))
			hEvent->wait = hStream->wait;
	}
	pthread_mutex_unlock(&lock);
	return err;
}

/* Waiting for a held event is what lets it complete: a single-threaded test
 * must not hang in cuEventSynchronize. */
static CUresult event_wait(CUevent e, int release)
{
	CUresult err = CUDA_SUCCESS;

	pthread_mutex_lock(&lock);
	if (!fake_handle_known(&events, e)) {
		err = misuse(CUDA_ERROR_INVALID_HANDLE);
	} else if (release) {
		word_block(&e->wait);
		e->held.pending = 0;
	} else if (!word_met(&e->wait)) {
		err = CUDA_ERROR_NOT_READY;
	} else if (e->held.pending && __atomic_load_n(&hold_events, __ATOMIC_RELAXED)) {
		err = CUDA_ERROR_NOT_READY;
	}
	pthread_mutex_unlock(&lock);
	return err;
}

CUresult cuEventQuery(CUevent hEvent)
{
	ENTER(cuEventQuery);
	return event_wait(hEvent, 0);
}

CUresult cuEventSynchronize(CUevent hEvent)
{
	ENTER(cuEventSynchronize);
	return event_wait(hEvent, 1);
}

void fake_cuda_hold_events(int hold)
{
	__atomic_store_n(&hold_events, hold, __ATOMIC_RELAXED);
}

/* The calling thread's context stack becomes the primary context of
 * device dev alone (visible ordinal), or empty for dev < 0, without a
 * counted call: a program's own context, for a test to call the library
 * under. */
void fake_cuda_context_current(int dev)
{
	ctx_depth = 0;
	if (dev >= 0 && dev < n_visible)
		ctx_stack[ctx_depth++] = &primaries[dev];
}

/* ---- virtual memory ---- */

static int vm_aligned(uintptr_t n)
{
	return fake_vmm_aligned(n, VM_GRANULARITY);
}

/* Pinned device memory of a visible device is all the fake makes. */
static CUresult check_prop(const CUmemAllocationProp *prop)
{
	if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	return check_device(prop->location.id);
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
				       CUmemAllocationGranularity_flags option)
{
	ENTER(cuMemGetAllocationGranularity);
	if (!granularity || check_prop(prop) != CUDA_SUCCESS ||
	    (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
	     option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (!vmm_supported)
		return CUDA_ERROR_NOT_SUPPORTED;
	*granularity = VM_GRANULARITY;
	return CUDA_SUCCESS;
}

/* Address space only, PROT_NONE. As documented, size and addr are multiples
 * of the host page size and alignment a power of two or 0; the fake aligns a
 * reservation to the granularity at least, so that its start can be mapped.
 * addr is a hint: where it is taken, or misaligned, the range is elsewhere. */
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
			     unsigned long long flags)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct range *r;
	int dev;

	ENTER(cuMemAddressReserve);
	if (!ptr || flags || size == 0 || (size & (page - 1)) || (addr & (page - 1)) ||
	    (alignment & (alignment - 1)))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(&dev));
	if (alignment < VM_GRANULARITY)
		alignment = VM_GRANULARITY;
	if (!(r = malloc(sizeof *r)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*r = (struct range){.dev = dev};
	if (fake_vmm_reserve(&vmem, &r->span, (void *)(uintptr_t)addr, size, alignment, &r->mapped,
			     NULL) != FAKE_VMM_OK) {
		free(r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ptr = (CUdeviceptr)r->span.base;
	return CUDA_SUCCESS;
}

/* Whole reservations, as documented. One with mappings still in it is
 * refused (the documentation says nothing of that case): the caller unmaps
 * first, and the fake leaves nothing dangling. */
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	struct range *r;

	ENTER(cuMemAddressFree);
	if (!(r = fake_vmm_unreserve(&vmem, (uintptr_t)ptr, size)))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	munmap((void *)(uintptr_t)ptr, r->mapped);
	free(r);
	return CUDA_SUCCESS;
}

/* Backed by a memfd, so that the bytes outlive a mapping and two mappings of
 * one handle share them; counted against the device's capacity like
 * cuMemAlloc. No shareable handle type is offered: the devices say so in
 * CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED. */
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
		     const CUmemAllocationProp *prop, unsigned long long flags)
{
	enum fake_vmm_status st;
	struct fake_physical *pm;
	int dev;

	ENTER(cuMemCreate);
	if (!handle || flags || size == 0 || !vm_aligned(size))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(check_prop(prop));
	if (!vmm_supported)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE)
		return CUDA_ERROR_NOT_SUPPORTED;
	TRY(current_device(NULL));
	dev = prop->location.id;
	if (!(pm = malloc(sizeof *pm)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	st = fake_physical_create(&vmem, pm, dev, size, &used[visible[dev]], capacity, NULL);
	if (st != FAKE_VMM_OK) {
		free(pm);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)pm;
	return CUDA_SUCCESS;
}

/* The physical memory a handle names, live or not: the registry says. */
static void *physical_handle(CUmemGenericAllocationHandle handle)
{
	return (void *)(uintptr_t)handle;
}

/* As documented, memory still mapped is freed when its last mapping goes. */
CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	ENTER(cuMemRelease);
	if (fake_physical_release(&vmem, physical_handle(handle)))
		return CUDA_SUCCESS;
	return misuse(CUDA_ERROR_INVALID_VALUE);
}

/* Mapped but not accessible, as documented: the pages stay PROT_NONE until
 * cuMemSetAccess. The range must lie in one reservation and overlap no
 * mapping; ptr and size are multiples of the granularity and the offset is
 * 0, as the documentation says it must be for now. */
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
		  unsigned long long flags)
{
	CUresult err = CUDA_ERROR_INVALID_VALUE;
	struct fake_physical *pm;
	struct fake_mapping *m;
	uintptr_t a = (uintptr_t)ptr;

	ENTER(cuMemMap);
	if (!ptr || size == 0 || offset || flags || !vm_aligned(a) || !vm_aligned(size))
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(NULL));
	if (!(m = malloc(sizeof *m)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&lock);
	pm = fake_physical_of(&vmem, physical_handle(handle));
	if (fake_vmm_map_target(&vmem, a, size, pm, 0))
		err = fake_vmm_map(&vmem, m, a, size, pm, 0, PROT_NONE, NULL) ?
			      CUDA_SUCCESS :
			      CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&lock);
	if (err != CUDA_SUCCESS)
		free(m);
	/* Nothing matched: the caller named what is not there. */
	return err == CUDA_ERROR_INVALID_VALUE ? misuse(err) : err;
}

/* Whole mappings only, as documented; a range may cover several adjacent ones. */
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	int ok;

	ENTER(cuMemUnmap);
	pthread_mutex_lock(&lock);
	ok = fake_vmm_whole_mappings(&vmem, (uintptr_t)ptr, size);
	if (ok)
		fake_vmm_unmap(&vmem, (uintptr_t)ptr, size);
	pthread_mutex_unlock(&lock);
	return ok ? CUDA_SUCCESS : misuse(CUDA_ERROR_INVALID_VALUE);
}

/* Access is kept per device, for the copies to check; the pages themselves
 * allow what any device was given, since the host stands in for them all. */
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	struct fake_access acc = {0};

	ENTER(cuMemSetAccess);
	if (!desc || count == 0)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(NULL));
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
			return misuse(CUDA_ERROR_INVALID_VALUE);
		TRY(check_device(desc[i].location.id));
		if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
		    desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
		    desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return misuse(CUDA_ERROR_INVALID_VALUE);
		fake_access_give(&acc, desc[i].location.id,
				 desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE,
				 desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	}
	return fake_vmm_set_access(&vmem, (uintptr_t)ptr, size, &acc) ?
		       CUDA_SUCCESS :
		       misuse(CUDA_ERROR_INVALID_VALUE);
}

/* ---- IPC ---- */

/* Of cuMemAlloc memory only, as documented; a pointer inside an allocation
 * is taken too, and opening the handle gives that pointer back. */
CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	struct fake_ipc_handle h;
	struct range *r;
	int found;

	ENTER(cuIpcGetMemHandle);
	if (!pHandle || !dptr)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(NULL));
	pthread_mutex_lock(&lock);
	r = range_at((uintptr_t)dptr);
	found = r && r->span.kind == R_DEVICE;
	if (found)
		fake_ipc_export(&h, ipc_magic, &r->span, r->dev, (uintptr_t)dptr);
	pthread_mutex_unlock(&lock);
	if (!found)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	memset(pHandle, 0, sizeof *pHandle);
	memcpy(pHandle, &h, sizeof h);
	return CUDA_SUCCESS;
}

/* The memory is this process's heap, so only this process can open a handle
 * (the driver itself refuses that; the fake allows it, being the only way a
 * single-process test can): it gets the exporter's own address back. A handle
 * from another process is well formed but cannot be mapped here. */
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	CUresult err = CUDA_ERROR_INVALID_VALUE;
	struct fake_ipc_handle h;
	struct range *r;

	ENTER(cuIpcOpenMemHandle);
	if (!pdptr || Flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(NULL));
	memcpy(&h, &handle, sizeof h);
	if (memcmp(h.magic, ipc_magic, sizeof h.magic) != 0)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	if (h.pid != getpid())
		return CUDA_ERROR_MAP_FAILED;
	pthread_mutex_lock(&lock);
	r = fake_ipc_open(&registry, &ranges, h.base, h.serial, R_DEVICE);
	if (r) {
		*pdptr = (CUdeviceptr)(r->span.base + h.offset);
		err = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&lock);
	/* Nothing matched: the caller named what is not there. */
	return err == CUDA_ERROR_INVALID_VALUE ? misuse(err) : err;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	CUresult err = CUDA_ERROR_INVALID_VALUE;

	ENTER(cuIpcCloseMemHandle);
	if (!dptr)
		return misuse(CUDA_ERROR_INVALID_VALUE);
	TRY(current_device(NULL));
	pthread_mutex_lock(&lock);
	if (fake_vmm_ipc_close(&vmem, (uintptr_t)dptr, R_DEVICE, 0))
		err = CUDA_SUCCESS;
	pthread_mutex_unlock(&lock);
	/* Nothing matched: the caller named what is not there. */
	return err == CUDA_ERROR_INVALID_VALUE ? misuse(err) : err;
}

/* ---- leaks ---- */

/* Retained primary contexts, one per device however often; under lock. */
static unsigned long live_contexts(void)
{
	unsigned long n = 0;

	for (int i = 0; i < n_visible; i++)
		n += primaries[i].refs != 0;
	return n;
}

size_t fake_cuda_live(void)
{
	size_t n = 0;

	pthread_mutex_lock(&lock);
	for (int k = 0; k < R_KINDS; k++)
		n += registry.live_count[k];
	n += live_streams + live_events + vmem.live_physicals + live_contexts();
	pthread_mutex_unlock(&lock);
	return n;
}

/* What the report says beyond the ranges, under lock. */
static void unload_report(void)
{
	const struct fake_leak others[] = {
		{"physical allocation", vmem.live_physicals, 1, vmem.physical_bytes, "live"},
		{"stream", live_streams, 0, 0, "live"},
		{"event", live_events, 0, 0, "live"},
		{"primary context", live_contexts(), 0, 0, "retained"},
	};

	fake_registry_unload(&registry, others, sizeof others / sizeof *others);
}

__attribute__((destructor)) static void fake_cuda_unload(void)
{
	pthread_mutex_lock(&lock);
	unload_report();
	pthread_mutex_unlock(&lock);
}

#pragma GCC visibility pop
