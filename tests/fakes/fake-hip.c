/* fake-hip.c - a host-memory stand-in for libamdhip64.so, with test controls, for the HIP backend's tests. */
#define _GNU_SOURCE /* twalk_r, secure_getenv */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <search.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake-controls.h"

/* Everything not static is the runtime's API or a test control, and must stay
 * reachable by dlsym() whatever -fvisibility the build uses. */
#pragma GCC visibility push(default)

#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>

/* Test controls, reached with dlsym() by tests that dlopen() this library. */
#define FAKE_HIP_FAIL_ON FAKE_CONTROLS_FAIL_ON
void fake_hip_fail(const char *function, unsigned nth, int error);
unsigned long fake_hip_calls(const char *function);
size_t fake_hip_live(void);
void fake_hip_hold_events(int hold);

/* Every function of the runtime that this fake provides, in one list: the
 * call counters and fault injection are indexed by it. */
#define FAKE_HIP_FUNCTIONS(X)                                                                      \
	X(hipGetErrorString)                                                                       \
	X(hipGetErrorName)                                                                         \
	X(hipGetLastError)                                                                         \
	X(hipPeekAtLastError)                                                                      \
	X(hipInit)                                                                                 \
	X(hipDriverGetVersion)                                                                     \
	X(hipRuntimeGetVersion)                                                                    \
	X(hipGetDeviceCount)                                                                       \
	X(hipSetDevice)                                                                            \
	X(hipGetDevice)                                                                            \
	X(hipDeviceGetName)                                                                        \
	X(hipDeviceTotalMem)                                                                       \
	X(hipDeviceGetPCIBusId)                                                                    \
	X(hipDeviceSynchronize)                                                                    \
	X(hipMemGetInfo)                                                                           \
	X(hipMalloc)                                                                               \
	X(hipFree)                                                                                 \
	X(hipHostMalloc)                                                                           \
	X(hipHostFree)                                                                             \
	X(hipHostRegister)                                                                         \
	X(hipHostUnregister)                                                                       \
	X(hipMemcpy)                                                                               \
	X(hipMemcpyAsync)                                                                          \
	X(hipStreamCreate)                                                                         \
	X(hipStreamCreateWithFlags)                                                                \
	X(hipStreamDestroy)                                                                        \
	X(hipStreamSynchronize)                                                                    \
	X(hipStreamQuery)                                                                          \
	X(hipEventCreate)                                                                          \
	X(hipEventCreateWithFlags)                                                                 \
	X(hipEventDestroy)                                                                         \
	X(hipEventRecord)                                                                          \
	X(hipEventQuery)                                                                           \
	X(hipEventSynchronize)                                                                     \
	X(hipIpcGetMemHandle)                                                                      \
	X(hipIpcOpenMemHandle)                                                                     \
	X(hipIpcCloseMemHandle)

#define X(name) F_##name,
enum { FAKE_HIP_FUNCTIONS(X) F_COUNT };
#undef X
#define X(name) #name,
static const char *const function_names[F_COUNT] = {FAKE_HIP_FUNCTIONS(X)};
#undef X

static struct fake_counter counters[F_COUNT];

/* hipMalloc's alignment in ROCm; the backend may count on it. */
#define DEVICE_ALIGN 256
#define MAX_DEVICES 64

/* Read once, on the first call that needs them, as ROCm does at its init. */
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;
static int n_physical;
static int n_visible;
static int visible[MAX_DEVICES];     /* visible ordinal -> physical ordinal */
static size_t capacity;              /* bytes of each device */
static size_t used[MAX_DEVICES];     /* by physical ordinal; under lock */
static __thread int current_device;  /* visible ordinal, per thread as in HIP */
static __thread hipError_t last_error;
static int hold_events;

/* The live objects, all under lock: one tree of non-overlapping address ranges
 * (device and host allocations, registrations) so that any address inside one
 * finds it, and one tree each of the stream and event handles. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *ranges;
static void *streams;
static void *events;
static unsigned long next_serial;

enum range_kind { R_DEVICE, R_HOST, R_REGISTERED, R_KINDS };
static const char *const kind_names[R_KINDS] = {"device allocation", "host allocation",
						"host registration"};
static unsigned long live_count[R_KINDS];
static size_t live_bytes[R_KINDS];
static unsigned long live_streams, live_events, open_ipc;

struct range {
	uintptr_t base;
	size_t size;
	size_t mapped; /* host allocations: the length given to mmap() */
	enum range_kind kind;
	int dev; /* device allocations: physical ordinal */
	unsigned ipc_opens;
	unsigned long serial; /* tells a reused address from the one an IPC handle named */
};

struct ihipStream_t {
	int dev;
	unsigned flags;
};

struct ihipEvent_t {
	unsigned flags;
	int recorded;
	int pending; /* recorded while events were held, and not waited for since */
	int dev;
	hipStream_t stream;
};

/* What an IPC handle carries; it must fit HIP_IPC_HANDLE_SIZE. */
struct ipc_handle {
	char magic[8];
	pid_t pid;
	int dev;
	uintptr_t base;
	size_t offset;
	unsigned long serial;
};
_Static_assert(sizeof(struct ipc_handle) <= sizeof(hipIpcMemHandle_t), "IPC handle too large");
static const char ipc_magic[8] = "fakehip";

/* ---- errors ---- */

/* Names and texts as ROCm's hipGetErrorName and hipGetErrorString give them. */
static const struct fake_code error_table[] = {
	{hipSuccess, "hipSuccess", "no error"},
	{hipErrorInvalidValue, "hipErrorInvalidValue", "invalid argument"},
	{hipErrorOutOfMemory, "hipErrorOutOfMemory", "out of memory"},
	{hipErrorNotInitialized, "hipErrorNotInitialized", "initialization error"},
	{hipErrorDeinitialized, "hipErrorDeinitialized", "driver shutting down"},
	{hipErrorInvalidDevicePointer, "hipErrorInvalidDevicePointer", "invalid device pointer"},
	{hipErrorInvalidMemcpyDirection, "hipErrorInvalidMemcpyDirection",
	 "invalid copy direction for memcpy"},
	{hipErrorInsufficientDriver, "hipErrorInsufficientDriver",
	 "driver version is insufficient for runtime version"},
	{hipErrorNoDevice, "hipErrorNoDevice", "no ROCm-capable device is detected"},
	{hipErrorInvalidDevice, "hipErrorInvalidDevice", "invalid device ordinal"},
	{hipErrorInvalidContext, "hipErrorInvalidContext", "invalid device context"},
	{hipErrorMapFailed, "hipErrorMapFailed", "mapping of buffer object failed"},
	{hipErrorOperatingSystem, "hipErrorOperatingSystem",
	 "OS call failed or operation not supported on this OS"},
	{hipErrorInvalidHandle, "hipErrorInvalidHandle", "invalid resource handle"},
	{hipErrorIllegalState, "hipErrorIllegalState",
	 "the operation cannot be performed in the present state"},
	{hipErrorNotFound, "hipErrorNotFound", "named symbol not found"},
	{hipErrorNotReady, "hipErrorNotReady", "device not ready"},
	{hipErrorIllegalAddress, "hipErrorIllegalAddress", "an illegal memory access was encountered"},
	{hipErrorLaunchFailure, "hipErrorLaunchFailure", "unspecified launch failure"},
	{hipErrorHostMemoryAlreadyRegistered, "hipErrorHostMemoryAlreadyRegistered",
	 "part or all of the requested memory range is already mapped"},
	{hipErrorHostMemoryNotRegistered, "hipErrorHostMemoryNotRegistered",
	 "pointer does not correspond to a registered memory region"},
	{hipErrorNotSupported, "hipErrorNotSupported", "operation not supported"},
	{hipErrorUnknown, "hipErrorUnknown", "unknown error"},
	{hipErrorRuntimeMemory, "hipErrorRuntimeMemory", "runtime memory call returned error"},
	{hipErrorRuntimeOther, "hipErrorRuntimeOther", "runtime call other than memory returned error"},
};

/* Like ROCm 5.2, every call records its result, success too, for hipGetLastError. */
static hipError_t done(hipError_t err)
{
	last_error = err;
	return err;
}

/* ---- call counting and fault injection ---- */

static const struct fake_controls controls = {
	.fake = "fake-hip",
	.fail_function = "fake_hip_fail",
	.fail_env = "FAKE_HIP_FAIL",
	.code_word = "error",
	.code_max = INT_MAX,
	.functions = function_names,
	.n_functions = F_COUNT,
	.counters = counters,
	.codes = error_table,
	.n_codes = sizeof error_table / sizeof *error_table,
};

void fake_hip_fail(const char *function, unsigned nth, int error)
{
	fake_controls_fail(&controls, function, nth, error);
}

unsigned long fake_hip_calls(const char *function)
{
	return fake_controls_calls(&controls, function);
}

_Static_assert(hipSuccess == 0, "fake_controls_enter answers 0 for success");

/* Counts a call of f; returns the error it is to fail with, or hipSuccess. */
static hipError_t enter(int f)
{
	return (hipError_t)fake_controls_enter(&controls, f);
}

/* Each API function begins with this: counted, maybe failed on demand. */
#define ENTER(name)                                                                                \
	do {                                                                                       \
		hipError_t injected_ = enter(F_##name);                                            \
		if (injected_ != hipSuccess)                                                       \
			return done(injected_);                                                    \
	} while (0)

__attribute__((constructor)) static void fake_hip_load(void)
{
	fake_controls_load(&controls);
}

/* ---- devices ---- */

/* HIP_VISIBLE_DEVICES as ROCm reads it (and CUDA_VISIBLE_DEVICES when that is
 * unset or empty, as ROCm does too): decimal physical ordinals, comma-separated;
 * an entry that is not one ("01", "x", out of range) ends the list, and a
 * repeated one is skipped. */
static void parse_visible(const char *list)
{
	const char *p = list;
	char *end;

	n_visible = 0;
	while (*p) {
		int seen = 0;
		long v;

		if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9'))
			break;
		errno = 0;
		v = strtol(p, &end, 10);
		if (errno || (*end && *end != ',') || v >= n_physical)
			break;
		for (int i = 0; i < n_visible; i++)
			seen |= visible[i] == v;
		if (!seen)
			visible[n_visible++] = (int)v;
		p = *end ? end + 1 : end;
	}
}

static void devices_init(void)
{
	const char *list = getenv("HIP_VISIBLE_DEVICES");

	n_physical = (int)fake_controls_env_number(&controls, "FAKE_HIP_DEVICES", 2, 0, MAX_DEVICES);
	capacity = (size_t)fake_controls_env_number(&controls, "FAKE_HIP_MEMORY_MB", 1024, 0,
						    (long)(SIZE_MAX >> 21)) << 20;
	if (!list || !*list)
		list = getenv("CUDA_VISIBLE_DEVICES");
	if (list && *list) {
		parse_visible(list);
		return;
	}
	n_visible = n_physical;
	for (int i = 0; i < n_physical; i++)
		visible[i] = i;
}

static int device_count(void)
{
	pthread_once(&devices_once, devices_init);
	return n_visible;
}

/* hipSuccess where device (visible ordinal) exists. */
static hipError_t check_device(int device)
{
	int n = device_count();

	if (n == 0)
		return hipErrorNoDevice;
	return device < 0 || device >= n ? hipErrorInvalidDevice : hipSuccess;
}

/* Without devices, ROCm fails every call that needs its init. */
#define NEED_DEVICES()                                                                             \
	do {                                                                                       \
		if (device_count() == 0)                                                           \
			return done(hipErrorNoDevice);                                             \
	} while (0)

/* ---- the registries ---- */

static int range_cmp(const void *a, const void *b)
{
	const struct range *x = a, *y = b;

	if (x->base + x->size <= y->base)
		return -1;
	if (y->base + y->size <= x->base)
		return 1;
	return 0; /* overlapping: for a one-byte key, the range that holds it */
}

static int handle_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

	return x < y ? -1 : x > y;
}

/* The live range holding address p, under lock; NULL if none. */
static struct range *range_at(const void *p)
{
	struct range key = {.base = (uintptr_t)p, .size = 1};
	void *node = tfind(&key, &ranges, range_cmp);

	return node ? *(struct range **)node : NULL;
}

/* Enters r, under lock; returns the range it overlaps instead, if any. */
static struct range *range_add(struct range *r)
{
	void *node = tsearch(r, &ranges, range_cmp);

	if (!node)
		return NULL; /* the caller tells this from success by r not being in */
	if (*(struct range **)node != r)
		return *(struct range **)node;
	r->serial = ++next_serial;
	live_count[r->kind]++;
	live_bytes[r->kind] += r->size;
	return r;
}

static void range_remove(struct range *r)
{
	tdelete(r, &ranges, range_cmp);
	live_count[r->kind]--;
	live_bytes[r->kind] -= r->size;
	open_ipc -= r->ipc_opens;
}

/* Whether handle h is a live stream (the default ones too), under lock. */
static int stream_known(hipStream_t s)
{
	return s == NULL || s == hipStreamPerThread || tfind(s, &streams, handle_cmp);
}

static int event_known(hipEvent_t e)
{
	return e && tfind(e, &events, handle_cmp);
}

/* ---- errors and versions ---- */

const char *hipGetErrorName(hipError_t hip_error)
{
	int i = fake_controls_code_index(&controls, (int)hip_error);

	enter(F_hipGetErrorName); /* counted; it has no way to fail */
	return i < 0 ? "hipErrorUnknown" : error_table[i].name;
}

const char *hipGetErrorString(hipError_t hipError)
{
	int i = fake_controls_code_index(&controls, (int)hipError);

	enter(F_hipGetErrorString);
	return i < 0 ? "unknown error" : error_table[i].text;
}

hipError_t hipGetLastError(void)
{
	hipError_t err = last_error;

	ENTER(hipGetLastError);
	last_error = hipSuccess;
	return err;
}

hipError_t hipPeekAtLastError(void)
{
	ENTER(hipPeekAtLastError);
	return done(last_error);
}

hipError_t hipInit(unsigned int flags)
{
	ENTER(hipInit);
	if (flags != 0)
		return done(hipErrorInvalidValue);
	NEED_DEVICES();
	return done(hipSuccess);
}

hipError_t hipDriverGetVersion(int *driverVersion)
{
	ENTER(hipDriverGetVersion);
	if (!driverVersion)
		return done(hipErrorInvalidValue);
	*driverVersion = HIP_VERSION;
	return done(hipSuccess);
}

hipError_t hipRuntimeGetVersion(int *runtimeVersion)
{
	ENTER(hipRuntimeGetVersion);
	if (!runtimeVersion)
		return done(hipErrorInvalidValue);
	*runtimeVersion = HIP_VERSION;
	return done(hipSuccess);
}

/* ---- devices ---- */

hipError_t hipGetDeviceCount(int *count)
{
	ENTER(hipGetDeviceCount);
	if (!count)
		return done(hipErrorInvalidValue);
	*count = device_count();
	return done(*count ? hipSuccess : hipErrorNoDevice);
}

hipError_t hipSetDevice(int deviceId)
{
	hipError_t err;

	ENTER(hipSetDevice);
	if ((err = check_device(deviceId)) != hipSuccess)
		return done(err);
	current_device = deviceId;
	return done(hipSuccess);
}

hipError_t hipGetDevice(int *deviceId)
{
	ENTER(hipGetDevice);
	NEED_DEVICES();
	if (!deviceId)
		return done(hipErrorInvalidValue);
	*deviceId = current_device;
	return done(hipSuccess);
}

hipError_t hipDeviceGetName(char *name, int len, hipDevice_t device)
{
	hipError_t err;

	ENTER(hipDeviceGetName);
	if ((err = check_device(device)) != hipSuccess)
		return done(err);
	if (!name || len <= 0)
		return done(hipErrorInvalidValue);
	/* The physical ordinal in the name lets a test see HIP_VISIBLE_DEVICES at work. */
	snprintf(name, (size_t)len, "Fake HIP device %d", visible[device]);
	return done(hipSuccess);
}

hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t device)
{
	hipError_t err;

	ENTER(hipDeviceTotalMem);
	if ((err = check_device(device)) != hipSuccess)
		return done(err);
	if (!bytes)
		return done(hipErrorInvalidValue);
	*bytes = capacity;
	return done(hipSuccess);
}

hipError_t hipDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
	hipError_t err;

	ENTER(hipDeviceGetPCIBusId);
	if ((err = check_device(device)) != hipSuccess)
		return done(err);
	/* ROCm wants room for all of "dddd:bb:dd.f" and its NUL. */
	if (!pciBusId || len < 13)
		return done(hipErrorInvalidValue);
	snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", visible[device] + 1);
	return done(hipSuccess);
}

/* Ends the pending state of the events picked by the walk's closure. */
struct release_filter {
	int dev;              /* -1: any */
	hipStream_t stream;   /* used when by_stream */
	int by_stream;
	int count_only;       /* count pending ones, release none */
	unsigned long count;
};

static void release_visit(const void *node, VISIT which, void *closure)
{
	struct ihipEvent_t *e = *(struct ihipEvent_t *const *)node;
	struct release_filter *f = closure;

	if ((which != postorder && which != leaf) || !e->pending)
		return;
	if ((f->dev >= 0 && e->dev != f->dev) || (f->by_stream && e->stream != f->stream))
		return;
	f->count++;
	if (!f->count_only)
		e->pending = 0;
}

static unsigned long walk_events(struct release_filter *f)
{
	pthread_mutex_lock(&lock);
	twalk_r(events, release_visit, f);
	pthread_mutex_unlock(&lock);
	return f->count;
}

/* Copies run at once, so waiting for the device is waiting for held events. */
hipError_t hipDeviceSynchronize(void)
{
	struct release_filter f = {.dev = -1};

	ENTER(hipDeviceSynchronize);
	NEED_DEVICES();
	f.dev = current_device;
	walk_events(&f);
	return done(hipSuccess);
}

hipError_t hipMemGetInfo(size_t *free, size_t *total)
{
	int dev;

	ENTER(hipMemGetInfo);
	NEED_DEVICES();
	if (!free || !total)
		return done(hipErrorInvalidValue);
	dev = visible[current_device];
	pthread_mutex_lock(&lock);
	*free = capacity - used[dev];
	pthread_mutex_unlock(&lock);
	*total = capacity;
	return done(hipSuccess);
}

/* ---- memory ---- */

hipError_t hipMalloc(void **ptr, size_t size)
{
	struct range *r;
	void *p;
	int dev;

	ENTER(hipMalloc);
	NEED_DEVICES();
	if (!ptr)
		return done(hipErrorInvalidValue);
	*ptr = NULL;
	if (size == 0)
		return done(hipSuccess);
	dev = visible[current_device];
	/* Capacity counts the bytes asked for, so that a test can fill a device exactly. */
	pthread_mutex_lock(&lock);
	if (size > capacity - used[dev]) {
		pthread_mutex_unlock(&lock);
		return done(hipErrorOutOfMemory);
	}
	used[dev] += size;
	pthread_mutex_unlock(&lock);

	r = malloc(sizeof *r);
	p = size > SIZE_MAX - DEVICE_ALIGN ? NULL :
		aligned_alloc(DEVICE_ALIGN, (size + DEVICE_ALIGN - 1) & ~(size_t)(DEVICE_ALIGN - 1));
	pthread_mutex_lock(&lock);
	if (r && p) {
		*r = (struct range){.base = (uintptr_t)p, .size = size, .kind = R_DEVICE, .dev = dev};
		if (range_add(r) == r) {
			pthread_mutex_unlock(&lock);
			*ptr = p;
			return done(hipSuccess);
		}
	}
	used[dev] -= size;
	pthread_mutex_unlock(&lock);
	free(p);
	free(r);
	return done(hipErrorOutOfMemory);
}

/* Removes the range based at ptr if it is of kind; under no lock. */
static struct range *take_range(void *ptr, enum range_kind kind)
{
	struct range *r;

	pthread_mutex_lock(&lock);
	r = range_at(ptr);
	if (r && (r->base != (uintptr_t)ptr || r->kind != kind))
		r = NULL;
	if (r) {
		range_remove(r);
		if (kind == R_DEVICE)
			used[r->dev] -= r->size;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

hipError_t hipFree(void *ptr)
{
	struct range *r;

	ENTER(hipFree);
	NEED_DEVICES();
	if (!ptr)
		return done(hipSuccess);
	/* Stricter than ROCm, which also frees hipHostMalloc memory here: a
	 * backend that mixes the two is wrong on CUDA and should be told. */
	if (!(r = take_range(ptr, R_DEVICE)))
		return done(hipErrorInvalidValue);
	free(ptr);
	free(r);
	return done(hipSuccess);
}

#define HOST_MALLOC_FLAGS                                                                          \
	(hipHostMallocPortable | hipHostMallocMapped | hipHostMallocWriteCombined |                \
	 hipHostMallocNumaUser | hipHostMallocCoherent | hipHostMallocNonCoherent)

hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len;
	struct range *r;
	void *p;

	ENTER(hipHostMalloc);
	NEED_DEVICES();
	if (!ptr)
		return done(hipErrorInvalidValue);
	*ptr = NULL;
	if ((flags & ~(unsigned)HOST_MALLOC_FLAGS) ||
	    (flags & hipHostMallocCoherent && flags & hipHostMallocNonCoherent))
		return done(hipErrorInvalidValue);
	if (size == 0)
		return done(hipSuccess);
	if (size > SIZE_MAX - page)
		return done(hipErrorOutOfMemory);
	len = (size + page - 1) & ~(page - 1);
	if (!(r = malloc(sizeof *r)))
		return done(hipErrorOutOfMemory);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		free(r);
		return done(hipErrorOutOfMemory);
	}
	*r = (struct range){.base = (uintptr_t)p, .size = size, .mapped = len, .kind = R_HOST};
	pthread_mutex_lock(&lock);
	if (range_add(r) != r) {
		pthread_mutex_unlock(&lock);
		munmap(p, len);
		free(r);
		return done(hipErrorOutOfMemory);
	}
	pthread_mutex_unlock(&lock);
	*ptr = p;
	return done(hipSuccess);
}

hipError_t hipHostFree(void *ptr)
{
	struct range *r;

	ENTER(hipHostFree);
	NEED_DEVICES();
	if (!ptr)
		return done(hipSuccess);
	if (!(r = take_range(ptr, R_HOST)))
		return done(hipErrorInvalidValue);
	munmap(ptr, r->mapped);
	free(r);
	return done(hipSuccess);
}

#define HOST_REGISTER_FLAGS (hipHostRegisterPortable | hipHostRegisterMapped | hipHostRegisterIoMemory)

hipError_t hipHostRegister(void *hostPtr, size_t sizeBytes, unsigned int flags)
{
	struct range *r, *other;

	ENTER(hipHostRegister);
	NEED_DEVICES();
	if (!hostPtr || sizeBytes == 0 || (flags & ~(unsigned)HOST_REGISTER_FLAGS) ||
	    sizeBytes > UINTPTR_MAX - (uintptr_t)hostPtr)
		return done(hipErrorInvalidValue);
	if (!(r = malloc(sizeof *r)))
		return done(hipErrorOutOfMemory);
	*r = (struct range){.base = (uintptr_t)hostPtr, .size = sizeBytes, .kind = R_REGISTERED};
	pthread_mutex_lock(&lock);
	other = range_add(r);
	pthread_mutex_unlock(&lock);
	if (other == r)
		return done(hipSuccess);
	free(r);
	if (!other)
		return done(hipErrorOutOfMemory);
	/* Pinned memory pinned again is ROCm's error; device memory is no host memory. */
	return done(other->kind == R_DEVICE ? hipErrorInvalidValue :
					      hipErrorHostMemoryAlreadyRegistered);
}

hipError_t hipHostUnregister(void *hostPtr)
{
	struct range *r;

	ENTER(hipHostUnregister);
	NEED_DEVICES();
	if (!hostPtr)
		return done(hipErrorInvalidValue);
	if (!(r = take_range(hostPtr, R_REGISTERED)))
		return done(hipErrorHostMemoryNotRegistered);
	free(r);
	return done(hipSuccess);
}

/* ---- copies ---- */

/* Whether [p, p + size) may be copied: where p is inside a known range, the
 * copy must end inside it too, as ROCm checks; where the kind says p is device
 * memory, it must be. Under no lock. */
static int copy_side_ok(const void *p, size_t size, int must_be_device)
{
	struct range *r;
	int ok;

	pthread_mutex_lock(&lock);
	r = range_at(p);
	ok = r ? size <= r->base + r->size - (uintptr_t)p && (!must_be_device || r->kind == R_DEVICE) :
		 !must_be_device;
	pthread_mutex_unlock(&lock);
	return ok;
}

static hipError_t copy(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind)
{
	int dst_device, src_device;

	if ((unsigned)kind > hipMemcpyDefault)
		return hipErrorInvalidMemcpyDirection;
	if (sizeBytes == 0)
		return hipSuccess;
	if (!dst || !src)
		return hipErrorInvalidValue;
	dst_device = kind == hipMemcpyHostToDevice || kind == hipMemcpyDeviceToDevice;
	src_device = kind == hipMemcpyDeviceToHost || kind == hipMemcpyDeviceToDevice;
	if (!copy_side_ok(dst, sizeBytes, dst_device) || !copy_side_ok(src, sizeBytes, src_device))
		return hipErrorInvalidValue;
	memmove(dst, src, sizeBytes);
	return hipSuccess;
}

hipError_t hipMemcpy(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind)
{
	ENTER(hipMemcpy);
	NEED_DEVICES();
	return done(copy(dst, src, sizeBytes, kind));
}

/* The copy is done before this returns, in the calling thread: work on one
 * stream then completes in order, and is done whenever anyone could wait. */
hipError_t hipMemcpyAsync(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind,
			  hipStream_t stream)
{
	int known;

	ENTER(hipMemcpyAsync);
	NEED_DEVICES();
	pthread_mutex_lock(&lock);
	known = stream_known(stream);
	pthread_mutex_unlock(&lock);
	if (!known)
		return done(hipErrorInvalidHandle);
	return done(copy(dst, src, sizeBytes, kind));
}

/* ---- streams ---- */

static hipError_t stream_create(hipStream_t *stream, unsigned flags)
{
	struct ihipStream_t *s;
	void *node;

	if (!stream)
		return hipErrorInvalidValue;
	if (flags & ~(unsigned)hipStreamNonBlocking)
		return hipErrorInvalidValue;
	if (!(s = malloc(sizeof *s)))
		return hipErrorOutOfMemory;
	*s = (struct ihipStream_t){.dev = current_device, .flags = flags};
	pthread_mutex_lock(&lock);
	node = tsearch(s, &streams, handle_cmp);
	live_streams += node != NULL;
	pthread_mutex_unlock(&lock);
	if (!node) {
		free(s);
		return hipErrorOutOfMemory;
	}
	*stream = s;
	return hipSuccess;
}

hipError_t hipStreamCreate(hipStream_t *stream)
{
	ENTER(hipStreamCreate);
	NEED_DEVICES();
	return done(stream_create(stream, hipStreamDefault));
}

hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags)
{
	ENTER(hipStreamCreateWithFlags);
	NEED_DEVICES();
	return done(stream_create(stream, flags));
}

static void forget_stream_visit(const void *node, VISIT which, void *closure)
{
	struct ihipEvent_t *e = *(struct ihipEvent_t *const *)node;

	if ((which == postorder || which == leaf) && e->stream == closure)
		e->stream = NULL;
}

hipError_t hipStreamDestroy(hipStream_t stream)
{
	int known;

	ENTER(hipStreamDestroy);
	NEED_DEVICES();
	pthread_mutex_lock(&lock);
	/* The default streams are not the caller's to destroy. */
	known = stream && stream != hipStreamPerThread && tdelete(stream, &streams, handle_cmp);
	if (known) {
		live_streams--;
		/* An event's stream is only compared, but a new stream may reuse the address. */
		twalk_r(events, forget_stream_visit, stream);
	}
	pthread_mutex_unlock(&lock);
	if (!known)
		return done(hipErrorInvalidHandle);
	free(stream);
	return done(hipSuccess);
}

/* Held events recorded on stream: what its work still waits for. */
static hipError_t stream_wait(hipStream_t stream, int release)
{
	struct release_filter f = {.dev = -1, .stream = stream, .by_stream = 1, .count_only = !release};
	int known;

	pthread_mutex_lock(&lock);
	known = stream_known(stream);
	pthread_mutex_unlock(&lock);
	if (!known)
		return hipErrorInvalidHandle;
	if (stream == hipStreamPerThread)
		f.stream = NULL;
	walk_events(&f);
	return !release && f.count && __atomic_load_n(&hold_events, __ATOMIC_RELAXED) ?
		       hipErrorNotReady :
		       hipSuccess;
}

hipError_t hipStreamSynchronize(hipStream_t stream)
{
	ENTER(hipStreamSynchronize);
	NEED_DEVICES();
	return done(stream_wait(stream, 1));
}

hipError_t hipStreamQuery(hipStream_t stream)
{
	ENTER(hipStreamQuery);
	NEED_DEVICES();
	return done(stream_wait(stream, 0));
}

/* ---- events ---- */

#define EVENT_FLAGS                                                                                \
	(hipEventBlockingSync | hipEventDisableTiming | hipEventInterprocess |                     \
	 hipEventReleaseToDevice | hipEventReleaseToSystem)

static hipError_t event_create(hipEvent_t *event, unsigned flags)
{
	struct ihipEvent_t *e;
	void *node;

	if (!event || (flags & ~(unsigned)EVENT_FLAGS))
		return hipErrorInvalidValue;
	/* As in CUDA and ROCm, an interprocess event cannot time. */
	if (flags & hipEventInterprocess && !(flags & hipEventDisableTiming))
		return hipErrorInvalidValue;
	if (!(e = malloc(sizeof *e)))
		return hipErrorOutOfMemory;
	*e = (struct ihipEvent_t){.flags = flags, .dev = current_device};
	pthread_mutex_lock(&lock);
	node = tsearch(e, &events, handle_cmp);
	live_events += node != NULL;
	pthread_mutex_unlock(&lock);
	if (!node) {
		free(e);
		return hipErrorOutOfMemory;
	}
	*event = e;
	return hipSuccess;
}

hipError_t hipEventCreate(hipEvent_t *event)
{
	ENTER(hipEventCreate);
	NEED_DEVICES();
	return done(event_create(event, hipEventDefault));
}

hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned flags)
{
	ENTER(hipEventCreateWithFlags);
	NEED_DEVICES();
	return done(event_create(event, flags));
}

hipError_t hipEventDestroy(hipEvent_t event)
{
	int known;

	ENTER(hipEventDestroy);
	NEED_DEVICES();
	pthread_mutex_lock(&lock);
	known = event && tdelete(event, &events, handle_cmp);
	live_events -= known != 0;
	pthread_mutex_unlock(&lock);
	if (!known)
		return done(hipErrorInvalidHandle);
	free(event);
	return done(hipSuccess);
}

hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream)
{
	hipError_t err = hipSuccess;

	ENTER(hipEventRecord);
	NEED_DEVICES();
	pthread_mutex_lock(&lock);
	if (!event_known(event) || !stream_known(stream)) {
		err = hipErrorInvalidHandle;
	} else {
		event->recorded = 1;
		event->pending = __atomic_load_n(&hold_events, __ATOMIC_RELAXED) != 0;
		event->stream = stream == hipStreamPerThread ? NULL : stream;
		event->dev = stream && stream != hipStreamPerThread ? stream->dev : current_device;
	}
	pthread_mutex_unlock(&lock);
	return done(err);
}

hipError_t hipEventQuery(hipEvent_t event)
{
	hipError_t err = hipSuccess;

	ENTER(hipEventQuery);
	NEED_DEVICES();
	pthread_mutex_lock(&lock);
	if (!event_known(event))
		err = hipErrorInvalidHandle;
	else if (event->pending && __atomic_load_n(&hold_events, __ATOMIC_RELAXED))
		err = hipErrorNotReady;
	pthread_mutex_unlock(&lock);
	return done(err);
}

/* Waiting for a held event is what lets it complete: a single-threaded test
 * must not hang here. */
hipError_t hipEventSynchronize(hipEvent_t event)
{
	hipError_t err = hipSuccess;

	ENTER(hipEventSynchronize);
	NEED_DEVICES();
	pthread_mutex_lock(&lock);
	if (event_known(event))
		event->pending = 0;
	else
		err = hipErrorInvalidHandle;
	pthread_mutex_unlock(&lock);
	return done(err);
}

void fake_hip_hold_events(int hold)
{
	__atomic_store_n(&hold_events, hold, __ATOMIC_RELAXED);
}

/* ---- IPC ---- */

hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *handle, void *devPtr)
{
	struct ipc_handle h;
	struct range *r;
	int found;

	ENTER(hipIpcGetMemHandle);
	NEED_DEVICES();
	if (!handle || !devPtr)
		return done(hipErrorInvalidValue);
	pthread_mutex_lock(&lock);
	r = range_at(devPtr);
	found = r && r->kind == R_DEVICE;
	if (found) {
		memset(&h, 0, sizeof h);
		memcpy(h.magic, ipc_magic, sizeof h.magic);
		h.pid = getpid();
		h.dev = r->dev;
		h.base = r->base;
		h.offset = (uintptr_t)devPtr - r->base;
		h.serial = r->serial;
	}
	pthread_mutex_unlock(&lock);
	if (!found)
		return done(hipErrorInvalidValue);
	memset(handle, 0, sizeof *handle);
	memcpy(handle, &h, sizeof h);
	return done(hipSuccess);
}

/* The memory is this process's heap, so only this process can open a handle:
 * it gets the exporter's own address back. A handle from another process is
 * well formed but cannot be mapped here. */
hipError_t hipIpcOpenMemHandle(void **devPtr, hipIpcMemHandle_t handle, unsigned int flags)
{
	hipError_t err = hipErrorInvalidValue;
	struct ipc_handle h;
	struct range *r;

	ENTER(hipIpcOpenMemHandle);
	NEED_DEVICES();
	if (!devPtr || flags != hipIpcMemLazyEnablePeerAccess)
		return done(hipErrorInvalidValue);
	memcpy(&h, &handle, sizeof h);
	if (memcmp(h.magic, ipc_magic, sizeof h.magic) != 0)
		return done(hipErrorInvalidValue);
	if (h.pid != getpid())
		return done(hipErrorMapFailed);
	pthread_mutex_lock(&lock);
	r = range_at((void *)h.base);
	if (r && r->kind == R_DEVICE && r->base == h.base && r->serial == h.serial) {
		r->ipc_opens++;
		open_ipc++;
		*devPtr = (char *)r->base + h.offset;
		err = hipSuccess;
	}
	pthread_mutex_unlock(&lock);
	return done(err);
}

hipError_t hipIpcCloseMemHandle(void *devPtr)
{
	hipError_t err = hipErrorInvalidValue;
	struct range *r;

	ENTER(hipIpcCloseMemHandle);
	NEED_DEVICES();
	if (!devPtr)
		return done(hipErrorInvalidValue);
	pthread_mutex_lock(&lock);
	r = range_at(devPtr);
	if (r && r->kind == R_DEVICE && r->ipc_opens) {
		r->ipc_opens--;
		open_ipc--;
		err = hipSuccess;
	}
	pthread_mutex_unlock(&lock);
	return done(err);
}

/* ---- leaks ---- */

size_t fake_hip_live(void)
{
	size_t n;

	pthread_mutex_lock(&lock);
	n = live_count[R_DEVICE] + live_count[R_HOST] + live_streams + live_events;
	pthread_mutex_unlock(&lock);
	return n;
}

static void report(FILE *out)
{
	for (int k = 0; k < R_KINDS; k++)
		if (live_count[k])
			fprintf(out, "fake-hip: %lu %s(s), %zu bytes, still live at unload\n",
				live_count[k], kind_names[k], live_bytes[k]);
	if (live_streams)
		fprintf(out, "fake-hip: %lu stream(s) still live at unload\n", live_streams);
	if (live_events)
		fprintf(out, "fake-hip: %lu event(s) still live at unload\n", live_events);
	if (open_ipc)
		fprintf(out, "fake-hip: %lu IPC mapping(s) still open at unload\n", open_ipc);
}

/* What is still live is left as it is: the program may yet use it. */
__attribute__((destructor)) static void fake_hip_unload(void)
{
	const char *path = secure_getenv("FAKE_HIP_LEAKS");
	FILE *f;

	pthread_mutex_lock(&lock);
	if (live_count[R_DEVICE] || live_count[R_HOST] || live_count[R_REGISTERED] || live_streams ||
	    live_events || open_ipc) {
		report(stderr);
		if (path && *path) {
			if ((f = fopen(path, "a"))) {
				report(f);
				fclose(f);
			} else {
				fprintf(stderr, "fake-hip: FAKE_HIP_LEAKS: %s: %s\n", path,
					strerror(errno));
			}
		}
	}
	pthread_mutex_unlock(&lock);
}

#pragma GCC visibility pop
