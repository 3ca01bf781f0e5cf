/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* devcache.h - the public API of libdevcache: contexts, devices, tunables, errors, logging. */
#ifndef DEVCACHE_H
#define DEVCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <devcache-version.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && __GNUC__ >= 4
#define DEVCACHE_API __attribute__((visibility("default")))
#define DEVCACHE_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define DEVCACHE_API
#define DEVCACHE_PRINTF(f, a)
#endif

/* ---- Errors -------------------------------------------------------------
 * Every call returns 0 or one of these negative codes.  The thread that made
 * the call can then read a detail message with devcache_last_error(). */
enum devcache_error {
	DEVCACHE_OK = 0,
	DEVCACHE_EINVAL = -1,    /* invalid argument */
	DEVCACHE_ENOMEM = -2,    /* out of memory (host or device) */
	DEVCACHE_ECONFIG = -3,   /* configuration error */
	DEVCACHE_ENODEV = -4,    /* no such device */
	DEVCACHE_EBACKEND = -5,  /* backend or driver failure */
	DEVCACHE_EABI = -6,      /* backend module ABI mismatch */
	DEVCACHE_EIO = -7,       /* input/output error */
	DEVCACHE_EFORMAT = -8,   /* malformed file */
	DEVCACHE_ENOTSUP = -9,   /* not supported */
	DEVCACHE_EBUSY = -10,    /* resource busy */
	DEVCACHE_ECANCELED = -11,/* canceled */
	DEVCACHE_ENOENT = -12,   /* no such entry */
	DEVCACHE_EAGAIN = -13,   /* not ready yet */
	DEVCACHE_ETYPE = -14,    /* a value of another type than the one asked for */
	DEVCACHE_ERROR_MIN = -14
};

/* A translated one-line description of an error code. */
DEVCACHE_API const char *devcache_strerror(int err);
/* The detail message of the last failed call in this thread (never NULL). */
DEVCACHE_API const char *devcache_last_error(void);

/* ---- Version ------------------------------------------------------------ */
/* DEVCACHE_VERSION (compile time) and devcache_version() (run time) encode
 * major << 16 | minor << 8 | micro. */
DEVCACHE_API unsigned devcache_version(void);
DEVCACHE_API const char *devcache_version_string(void);

/* ---- Logging ------------------------------------------------------------ */
enum devcache_log_level {
	DEVCACHE_LOG_NONE = 0,
	DEVCACHE_LOG_ERROR = 1,
	DEVCACHE_LOG_WARNING = 2,
	DEVCACHE_LOG_INFO = 3,
	DEVCACHE_LOG_DEBUG = 4
};

/* The library prints nothing by itself: every message goes through the log
 * handler.  The default handler writes "libdevcache: LEVEL: MESSAGE" to
 * stderr.  Messages above the log_level tunable are not passed on. */
typedef void (*devcache_log_fn)(void *user, enum devcache_log_level level,
				const char *message);

/* ---- Context ------------------------------------------------------------ */
typedef struct devcache_ctx devcache_ctx_t;

/* Flags of devcache_open_args_t. */
#define DEVCACHE_OPEN_NO_FILES 0x1u /* read no configuration file */
#define DEVCACHE_OPEN_NO_ENV 0x2u   /* read no DEVCACHE_* environment variable */

typedef struct devcache_open_args {
	size_t struct_size;     /* sizeof(devcache_open_args_t) */
	const char *options;    /* "key:value,key:value", highest precedence; may be NULL */
	devcache_log_fn log_fn; /* NULL: the default handler */
	void *log_user;
	unsigned flags;         /* DEVCACHE_OPEN_* */
	void *reserved[8];
} devcache_open_args_t;

/* Open a context: merge the tunables from every source, load the backends
 * and enumerate their devices.  Contexts are thread-safe. */
DEVCACHE_API int devcache_open(devcache_ctx_t **ctx_p, const char *options);
DEVCACHE_API int devcache_open_ex(devcache_ctx_t **ctx_p, const devcache_open_args_t *args);
DEVCACHE_API void devcache_close(devcache_ctx_t *ctx);
/* Replace the log handler (NULL restores the default). */
DEVCACHE_API void devcache_set_log_handler(devcache_ctx_t *ctx, devcache_log_fn fn, void *user);

/* ---- Tunables ----------------------------------------------------------- */
typedef struct devcache_tunable_desc {
	const char *name;
	const char *type;          /* "bool", "int", "float", "size", "enum", "string", "list" */
	const char *default_value; /* as written in the table */
	const char *range;         /* accepted values, "" when any */
	const char *group;         /* "allocator", "model cache", "backends", "logging" */
	const char *summary;       /* one line, translated */
	const char *description;   /* the long description (English) */
	int effective;             /* 0 while the tunable has no effect yet */
	const char *module;        /* the backend module that declares it; NULL: the core */
	void *reserved[3];
} devcache_tunable_desc_t;

DEVCACHE_API size_t devcache_tunable_count(void);
DEVCACHE_API int devcache_tunable_describe(size_t index, devcache_tunable_desc_t *desc);
/* Every tunable of ctx: the core's (the same indexes as above), then those
 * that its loaded backend modules declare.  Strings live as long as ctx. */
DEVCACHE_API size_t devcache_config_count(devcache_ctx_t *ctx);
DEVCACHE_API int devcache_config_describe(devcache_ctx_t *ctx, size_t index,
					  devcache_tunable_desc_t *desc);
/* The current value of a tunable in ctx, formatted as it would be written in
 * devcache.conf, and where it came from ("default", "FILE:LINE",
 * "DEVCACHE_OPTIONS", "DEVCACHE_BACKEND_PATH", "devcache_open").
 * origin_p may be NULL; the origin string lives as long as ctx. */
DEVCACHE_API int devcache_config_get(devcache_ctx_t *ctx, const char *name, char *buf,
				     size_t buf_size, const char **origin_p);
/* Check one configuration file without applying it.  Every error is passed to
 * log_fn (or the default handler) at DEVCACHE_LOG_ERROR; the first one is also
 * the detail message.  Returns 0 or DEVCACHE_ECONFIG (DEVCACHE_EIO when the
 * file cannot be read). */
DEVCACHE_API int devcache_config_check_file(const char *path, devcache_log_fn log_fn,
					    void *user);

/* ---- Backends and devices ----------------------------------------------- */
enum devcache_backend_status {
	DEVCACHE_BACKEND_LOADED = 0,      /* loaded, possibly with zero devices */
	DEVCACHE_BACKEND_UNAVAILABLE = 1, /* found but refused or failed */
	DEVCACHE_BACKEND_EXCLUDED = 2,    /* excluded by the backends tunable */
	DEVCACHE_BACKEND_NOT_FOUND = 3    /* named in the backends tunable, not found */
};

typedef struct devcache_backend_info {
	const char *name;
	const char *path;   /* module file, "built-in" for host */
	enum devcache_backend_status status;
	const char *reason; /* why unavailable, why it has no device, or what its devices
			     * lack; "" otherwise */
	unsigned device_count;
	void *reserved[4];
} devcache_backend_info_t;

DEVCACHE_API size_t devcache_backend_count(devcache_ctx_t *ctx);
DEVCACHE_API int devcache_backend_info(devcache_ctx_t *ctx, size_t index,
				       devcache_backend_info_t *info);

typedef struct devcache_device devcache_device_t;

/* Capability bits of a device. */
#define DEVCACHE_CAP_VMM 0x1u         /* virtual memory: reserve, map, unmap */
#define DEVCACHE_CAP_IPC 0x2u         /* export memory to another process */
#define DEVCACHE_CAP_HOST_MEMORY 0x4u /* device memory is ordinary host memory */
#define DEVCACHE_CAP_ASYNC_COPY 0x8u  /* copies overlap with the host */

typedef struct devcache_device_info {
	char id[32];          /* "host", "cuda:0" */
	char name[256];       /* the vendor's product name */
	char backend[32];
	char pci_bus_id[32];  /* "" when not applicable */
	int ordinal;          /* index within its backend */
	uint64_t total_memory;
	uint64_t free_memory;
	uint64_t caps;        /* DEVCACHE_CAP_* */
	/* The largest single allocation the device makes: total_memory where
	 * its driver sets no lower limit (Level Zero's maxMemAllocSize). */
	uint64_t max_alloc_size;
	/* What its pointers are to a framework, as DLPack numbers device
	 * types (DLDeviceType: 1 CPU, 2 CUDA, 10 ROCm, 14 oneAPI), told by the
	 * backend module; 1 for the host; 0 where none applies. */
	int32_t dlpack_device_type;
	uint32_t reserved32;
	uint64_t reserved[6];
} devcache_device_info_t;

DEVCACHE_API size_t devcache_device_count(devcache_ctx_t *ctx);
DEVCACHE_API int devcache_device_at(devcache_ctx_t *ctx, size_t index, devcache_device_t **dev_p);
/* Names: "host", "cuda:0", "hip:1", "ze:0"; "cuda" means "cuda:0". */
DEVCACHE_API int devcache_device_get(devcache_ctx_t *ctx, const char *name,
				     devcache_device_t **dev_p);
DEVCACHE_API int devcache_device_info(devcache_device_t *dev, devcache_device_info_t *info);

/* ---- Streams -------------------------------------------------------------
 * A stream is the backend's own handle (a cudaStream_t, hipStream_t or Level
 * Zero command list); NULL is the device's default stream.  Programs that
 * have their own streams pass them as they are. */
typedef void *devcache_stream_t;

DEVCACHE_API int devcache_stream_create(devcache_device_t *dev, devcache_stream_t *stream_p);
DEVCACHE_API int devcache_stream_destroy(devcache_device_t *dev, devcache_stream_t stream);
DEVCACHE_API int devcache_stream_synchronize(devcache_device_t *dev, devcache_stream_t stream);
/* Copy between host memory and the device's memory, queued on stream; the
 * copy has completed when the call returns. */
DEVCACHE_API int devcache_copy_to_device(devcache_device_t *dev, void *dst, const void *src,
					size_t size, devcache_stream_t stream);
DEVCACHE_API int devcache_copy_to_host(devcache_device_t *dev, void *dst, const void *src,
				      size_t size, devcache_stream_t stream);

/* ---- The caching allocator -------------------------------------------------
 * Device memory, cached for reuse with PyTorch's policy (see libdevcache(3)
 * and the allocator tunables in devcache.conf(5)).  A block belongs to the
 * stream it was allocated on and is reused only on that stream once freed,
 * unless devcache_record_stream() named other streams that use it. */
DEVCACHE_API int devcache_alloc(devcache_device_t *dev, size_t size, devcache_stream_t stream,
				void **ptr_p);
DEVCACHE_API int devcache_free(devcache_device_t *dev, void *ptr);
/* The block at ptr is also used on stream: once freed, it is not reused
 * until the work queued on stream at the time of the free has completed. */
DEVCACHE_API int devcache_record_stream(devcache_device_t *dev, void *ptr,
					devcache_stream_t stream);
/* Return every cached, unused segment to the driver. */
DEVCACHE_API int devcache_empty_cache(devcache_device_t *dev);

/* Pinned host memory for fast copies to and from dev, cached the same way. */
DEVCACHE_API int devcache_host_alloc(devcache_device_t *dev, size_t size, void **ptr_p);
DEVCACHE_API int devcache_host_free(devcache_device_t *dev, void *ptr);
DEVCACHE_API int devcache_host_empty_cache(devcache_device_t *dev);

/* ---- Allocator statistics (PyTorch's memory_stats) ------------------------ */
enum devcache_pool {
	DEVCACHE_POOL_ALL = 0,   /* PyTorch's "all" */
	DEVCACHE_POOL_SMALL = 1, /* requests up to 1 MiB */
	DEVCACHE_POOL_LARGE = 2,
	DEVCACHE_POOL_COUNT = 3
};

typedef struct devcache_stat {
	int64_t current;
	int64_t peak;
	int64_t allocated; /* total increases since the last reset */
	int64_t freed;     /* total decreases since the last reset */
} devcache_stat_t;

typedef struct devcache_stats {
	/* Each indexed by enum devcache_pool. */
	devcache_stat_t allocation[DEVCACHE_POOL_COUNT];     /* blocks handed out */
	devcache_stat_t segment[DEVCACHE_POOL_COUNT];        /* driver allocations */
	devcache_stat_t active[DEVCACHE_POOL_COUNT];         /* handed out, or freed but in use by a stream */
	devcache_stat_t inactive_split[DEVCACHE_POOL_COUNT]; /* free blocks in split segments */
	devcache_stat_t allocated_bytes[DEVCACHE_POOL_COUNT];
	devcache_stat_t reserved_bytes[DEVCACHE_POOL_COUNT];
	devcache_stat_t active_bytes[DEVCACHE_POOL_COUNT];
	devcache_stat_t inactive_split_bytes[DEVCACHE_POOL_COUNT];
	devcache_stat_t requested_bytes[DEVCACHE_POOL_COUNT]; /* as asked, before rounding */
	devcache_stat_t oversize_allocations; /* blocks at or above max_split_size_mb */
	devcache_stat_t oversize_segments;
	uint64_t num_alloc_retries;    /* driver allocations retried after freeing cache */
	uint64_t num_ooms;             /* allocations that failed */
	uint64_t num_sync_all_streams; /* times every stream was synchronised to free cache */
	uint64_t num_device_alloc;     /* driver allocation calls */
	uint64_t num_device_free;      /* driver free calls */
	/* Fragmentation, which PyTorch does not report: */
	uint64_t largest_free_block;   /* the largest cached free block, bytes */
	double fragmentation;          /* 1 - largest_free_block / free cached memory: 0 for one block */
	int64_t max_split_size;        /* max_split_size_mb in bytes, -1 unlimited: PyTorch's key */
	uint64_t num_stitches;         /* requests served by stitching, which PyTorch's policy failed */
	uint64_t reserved[14];
} devcache_stats_t;

DEVCACHE_API int devcache_stats(devcache_device_t *dev, devcache_stats_t *stats);
DEVCACHE_API int devcache_host_stats(devcache_device_t *dev, devcache_stats_t *stats);
DEVCACHE_API int devcache_reset_peak(devcache_device_t *dev);
DEVCACHE_API int devcache_reset_accumulated(devcache_device_t *dev);
/* The memory summary table, laid out like torch.cuda.memory_summary(). */
DEVCACHE_API int devcache_summary(devcache_device_t *dev, FILE *out);
/* JSON: every segment and its blocks (address, size, requested size, state, stream). */
DEVCACHE_API int devcache_snapshot(devcache_device_t *dev, FILE *out);

/* ---- Memory pressure -------------------------------------------------------
 * When an allocation on a device cannot be served even after the cache is
 * emptied, the allocator calls every registered pressure callback (the
 * model cache evicts through one) and retries.  A callback returns the
 * number of bytes it released on that device (0 if none); it runs without
 * the allocator's locks held and may free device memory. */
typedef size_t (*devcache_pressure_fn)(void *user, devcache_device_t *dev, size_t bytes_needed);

DEVCACHE_API int devcache_pressure_register(devcache_ctx_t *ctx, devcache_pressure_fn fn,
					   void *user);
DEVCACHE_API int devcache_pressure_unregister(devcache_ctx_t *ctx, devcache_pressure_fn fn,
					     void *user);

/* ---- Model files -----------------------------------------------------------
 * A safetensors or GGUF file, its header parsed and every rule of its format
 * checked, its data not read.  A malformed file fails with DEVCACHE_EFORMAT
 * and a detail message naming the file and the fault (the tensor, or the
 * byte offset).  A model file is used by one thread at a time. */
typedef struct devcache_model_file devcache_model_file_t;

enum devcache_model_format {
	DEVCACHE_FORMAT_SAFETENSORS = 1,
	DEVCACHE_FORMAT_GGUF = 2
};

/* The most dimensions a tensor may have; a file with more is malformed. */
#define DEVCACHE_MAX_DIMS 16

typedef struct devcache_tensor_info {
	const char *name;  /* valid until the file is closed */
	const char *dtype; /* "F32", "BF16", "F8_E4M3", "Q4_K", ... */
	unsigned n_dims;   /* 0 for a scalar */
	uint64_t shape[DEVCACHE_MAX_DIMS]; /* in the file's order: safetensors outermost
					     * first, GGUF innermost first (ne[0]) */
	uint64_t offset;   /* of its first byte, from the start of its file */
	uint64_t size;     /* bytes */
	uint32_t shard;    /* the file of a set that holds it (0 for one file) */
	uint32_t place;    /* devcache_model_tensor*(): enum devcache_place; 0 otherwise */
	/* Grown into the reserved room (0.1.0): */
	int32_t dtype_id;  /* enum devcache_dtype: the dtype as a number */
	uint32_t align;    /* the largest power of two, at most 4096, dividing the data's
			    * address (devcache_model_tensor*()) or its file offset */
	uint32_t flags;    /* DEVCACHE_TENSOR_* */
	uint32_t reserved32;
	uint64_t reserved[1];
} devcache_tensor_info_t;

/* devcache_tensor_info_t.flags, from devcache_model_tensor*(): */
#define DEVCACHE_TENSOR_MAPPED 0x1u  /* the file's own mapping: zero copy */
#define DEVCACHE_TENSOR_ALIGNED_COPY 0x2u /* copied to meet devcache_load_args_t.align */

/* path is a safetensors file, a GGUF file, a *.safetensors.index.json
 * (Hugging Face shards), any shard of a GGUF split (the others are found
 * from its name and split.count), or a directory holding exactly one of
 * these.  A set of several files is checked as a whole and reads as one
 * model: its tensors in shard order, then file order within each shard. */
DEVCACHE_API int devcache_model_file_open(const char *path, devcache_model_file_t **mf_p);
DEVCACHE_API void devcache_model_file_close(devcache_model_file_t *mf);
/* A devcache_model_format value; *version_p (if not NULL) gets the GGUF
 * version, or 0 for safetensors. */
DEVCACHE_API int devcache_model_file_format(const devcache_model_file_t *mf, unsigned *version_p);
/* The files of a set, in shard order (one for a single file): the path
 * (valid until the file is closed) and size of each. */
DEVCACHE_API size_t devcache_model_file_shard_count(const devcache_model_file_t *mf);
DEVCACHE_API int devcache_model_file_shard(const devcache_model_file_t *mf, size_t index,
					  const char **path_p, uint64_t *size_p);
/* Bytes in the file (a set: in all its files), and where the (first)
 * file's data section starts. */
DEVCACHE_API uint64_t devcache_model_file_size(const devcache_model_file_t *mf);
DEVCACHE_API uint64_t devcache_model_file_data_offset(const devcache_model_file_t *mf);
/* Tensors in file order. */
DEVCACHE_API size_t devcache_model_file_tensor_count(const devcache_model_file_t *mf);
DEVCACHE_API int devcache_model_file_tensor(const devcache_model_file_t *mf, size_t index,
					   devcache_tensor_info_t *info);
/* DEVCACHE_ENOENT when no tensor has that name. */
DEVCACHE_API int devcache_model_file_find(const devcache_model_file_t *mf, const char *name,
					 devcache_tensor_info_t *info);
/* Metadata in file order: safetensors' __metadata__ strings, GGUF's
 * key-value pairs; each value as JSON text (a string, number, boolean or
 * array), valid until the file is closed. */
DEVCACHE_API size_t devcache_model_file_metadata_count(const devcache_model_file_t *mf);
DEVCACHE_API int devcache_model_file_metadata(const devcache_model_file_t *mf, size_t index,
					     const char **key_p, const char **value_json_p);

/* ---- Pipelines -------------------------------------------------------------
 * A diffusers pipeline folder (it has model_index.json) is not one model
 * but several, each in a folder of its own: devcache_model_file_open() and
 * devcache_model_load() refuse it and name its components; these list them. */
typedef struct devcache_pipeline devcache_pipeline_t;

typedef struct devcache_component {
	const char *name;       /* "unet", "vae", "text_encoder" */
	const char *path;       /* its folder: DIR/unet */
	const char *library;    /* from model_index.json: "diffusers"; "" when absent */
	const char *class_name; /* "UNet2DConditionModel"; "" when absent */
	uint64_t size;          /* bytes in its weight files; 0 when it has none */
	size_t shards;          /* its weight files; 0 for a scheduler, a tokenizer */
	uint64_t reserved[4];
} devcache_component_t;

DEVCACHE_API int devcache_pipeline_open(const char *dir, devcache_pipeline_t **pl_p);
DEVCACHE_API void devcache_pipeline_close(devcache_pipeline_t *pl);
/* Components in model_index.json's order. */
DEVCACHE_API size_t devcache_pipeline_component_count(const devcache_pipeline_t *pl);
DEVCACHE_API int devcache_pipeline_component(const devcache_pipeline_t *pl, size_t index,
					    devcache_component_t *comp);

/* ---- The model cache -------------------------------------------------------
 * devcache_model_load() places a model file's tensors on a device (on the
 * host: the file mapped in place) and keeps it cached: loading the same
 * file again for the same device is a hit.  The model returned is locked
 * until devcache_model_release(); locked models are never evicted.  Within
 * max_cache_ram and max_cache_vram, the least recently used unlocked models
 * are evicted to make room, and when the allocator runs out of memory. */
typedef struct devcache_model devcache_model_t;

/* Called from the loading thread as the load goes on; a non-zero return
 * cancels it (the load then fails with DEVCACHE_ECANCELED). */
typedef int (*devcache_progress_fn)(void *user, uint64_t bytes_done, uint64_t bytes_total);

/* Host placement: a private copy-on-write mapping, so the tensors can be
 * patched in place (LoRA merges) without touching the file. */
#define DEVCACHE_LOAD_WRITABLE 0x1u

/* What one load did: filled in when devcache_load_args_t.result is set. */
typedef struct devcache_load_result {
	int hit;                 /* 1: served from the cache */
	int from_ram;            /* 1: a hit served from a RAM copy (a copy, no disk read) */
	uint64_t bytes_read;     /* from the model's files by this load */
	uint64_t bytes_uploaded; /* to the device by this load */
	double seconds;          /* the whole call */
	uint64_t device_bytes;   /* the model's tensor bytes on the device */
	uint64_t host_bytes;     /* and on the host (a partial load: the rest) */
	/* Grown into the reserved room (0.1.0): */
	uint64_t mapped_bytes;   /* of host_bytes: the files' own mappings, zero copy */
	uint64_t aligned_copies; /* tensors copied to meet devcache_load_args_t.align */
	uint64_t aligned_bytes;  /* and their bytes */
	uint64_t reserved[5];
} devcache_load_result_t;

typedef struct devcache_load_args {
	size_t struct_size;        /* sizeof(devcache_load_args_t); smaller sizes of
				    * older programs are accepted */
	unsigned flags;            /* DEVCACHE_LOAD_* */
	devcache_progress_fn progress;
	void *progress_user;
	devcache_stream_t stream;  /* uploads are queued on it; done when the load returns */
	devcache_load_result_t *result; /* NULL, or filled in when the load succeeds */
	/* Grown into the reserved room (0.1.0), read when struct_size has it: */
	size_t align;              /* 0, or a power of two up to 4096: every tensor's data
				    * starts at a multiple of it (a tensor of the host's
				    * mapping that does not is copied) */
	void *reserved[7];
} devcache_load_args_t;

/* args may be NULL for the defaults. */
DEVCACHE_API int devcache_model_load(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev,
				    const devcache_load_args_t *args, devcache_model_t **model_p);
DEVCACHE_API void devcache_model_release(devcache_model_t *model);

/* Where a tensor is: devcache_tensor_info_t.place. */
enum devcache_place {
	DEVCACHE_PLACE_DEVICE = 1, /* in the model's device's memory */
	DEVCACHE_PLACE_HOST = 2    /* in host memory: the file's mapping or its copy */
};

/* A model as it stands: where it is and how much of it is on the device. */
typedef struct devcache_model_info {
	devcache_device_t *device;
	uint64_t device_bytes;   /* its tensors' bytes on the device */
	uint64_t host_bytes;     /* and on the host */
	size_t tensors;
	size_t device_tensors;   /* how many are on the device */
	int partial;             /* 1: loaded with partial_loading, some on the host */
	int locks;
	uint64_t reserved[8];
} devcache_model_info_t;

DEVCACHE_API int devcache_model_info(const devcache_model_t *model, devcache_model_info_t *info);
/* A partially loaded model: make the named tensors (names NULL: all)
 * resident on the device, copying them through the staging ring, and
 * evicting first the least recently used tensors of partially loaded models
 * (unlocked ones, or this one's outside the list), then whole unlocked
 * models.  DEVCACHE_ENOMEM when the list does not fit the budget. */
DEVCACHE_API int devcache_model_make_resident(devcache_model_t *model, const char *const *names,
					     size_t n, devcache_stream_t stream);
/* Move the named tensors (names NULL: all) of a partially loaded model back
 * to the host, giving their device memory back. */
DEVCACHE_API int devcache_model_move_to_host(devcache_model_t *model, const char *const *names,
					    size_t n);
/* The parsed file (metadata, tensors), valid while the model is locked. */
DEVCACHE_API const devcache_model_file_t *devcache_model_file(const devcache_model_t *model);
/* Where a tensor's bytes are on the model's device. */
DEVCACHE_API int devcache_model_tensor(const devcache_model_t *model, const char *name,
				      devcache_tensor_info_t *info, void **data_p);
DEVCACHE_API int devcache_model_tensor_at(const devcache_model_t *model, size_t index,
					 devcache_tensor_info_t *info, void **data_p);
/* A tensor's bytes (size: the tensor's) copied into host memory at dst,
 * from wherever they are: the device, a copy in RAM, or the file, read
 * with pread() rather than through its mapping, so that a file truncated
 * under the cache is an error naming it, not SIGBUS. */
DEVCACHE_API int devcache_model_tensor_copy(const devcache_model_t *model, const char *name,
					   void *dst, size_t size);

typedef struct devcache_cache_stats {
	uint64_t hits, misses, evictions, failed_loads, cancelled_loads;
	uint64_t bytes_read;     /* from files */
	uint64_t bytes_uploaded; /* to devices */
	double load_seconds;     /* spent in loads that missed */
	uint64_t models, locked_models;
	uint64_t ram_used, ram_budget; /* host placements and RAM copies */
	uint64_t ram_copies;           /* models evicted from a device, kept in RAM */
	uint64_t ram_copy_reloads;     /* hits served by copying a RAM copy back */
	uint64_t offloads;             /* models moved off their device and kept
					* (a RAM copy, or their host part) */
	uint64_t ram_peak;             /* the high-water mark of ram_used */
	uint64_t reserved[4];
} devcache_cache_stats_t;

DEVCACHE_API int devcache_cache_stats(devcache_ctx_t *ctx, devcache_cache_stats_t *stats);
/* The model cache's use and budget on one device. */
DEVCACHE_API int devcache_cache_device_usage(devcache_ctx_t *ctx, devcache_device_t *dev,
					    uint64_t *used_p, uint64_t *budget_p);
/* The cache as a table: each model (file, device, size, locks), the
 * budgets and their use, hits, misses, evictions, bytes read and uploaded. */
DEVCACHE_API int devcache_cache_summary(devcache_ctx_t *ctx, FILE *out);
/* Evict every unlocked model; returns how many. */
DEVCACHE_API size_t devcache_cache_evict_all(devcache_ctx_t *ctx);

/* ---- The model cache, model by model (issue 32: a model manager's calls) ---
 * What an InvokeAI-like model manager drives: what the cache holds, model
 * by model; offload, evict and make room; locks that reserve working
 * memory; partial residency by bytes; the cache's share of each device.
 * Each call is atomic with respect to the others and to loads. */

/* Where a cached model's tensors are: devcache_cached_model_t.where. */
enum devcache_residence {
	DEVCACHE_RESIDENCE_DEVICE = 1,   /* all on its device */
	DEVCACHE_RESIDENCE_HOST = 2,     /* placed on the host device: its files */
	DEVCACHE_RESIDENCE_RAM_COPY = 3, /* offloaded from its device to a copy in RAM */
	DEVCACHE_RESIDENCE_PARTIAL = 4   /* some on its device, the rest on the host */
};

/* One model the cache holds, as devcache_cache_models() lists it. */
typedef struct devcache_cached_model {
	const char *path;        /* as it was loaded (its index, for a set) */
	devcache_device_t *device;
	int where;               /* enum devcache_residence */
	int writable;            /* loaded with DEVCACHE_LOAD_WRITABLE */
	int locks;               /* loads and devcache_model_lock()s not yet released */
	int loading;             /* 1: a load or a move of its tensors is under way */
	uint64_t size;           /* its files' bytes */
	uint64_t device_bytes;   /* its tensors' bytes on its device */
	uint64_t host_bytes;     /* and on the host, or in its RAM copy */
	uint64_t charged_device; /* charged to its device's budget (max_cache_vram) */
	uint64_t charged_ram;    /* charged to max_cache_ram */
	uint64_t working_mem;    /* reserved by its locks (devcache_model_lock) */
	uint64_t hits;           /* loads it served */
	double last_use;         /* when it was last loaded or used: CLOCK_MONOTONIC seconds */
	uint64_t reserved[8];
} devcache_cached_model_t;

/* The models the cache holds, most recently used first, in a new array
 * of *n_p (free it with devcache_cache_models_free()). */
DEVCACHE_API int devcache_cache_models(devcache_ctx_t *ctx, devcache_cached_model_t **models_p,
				      size_t *n_p);
DEVCACHE_API void devcache_cache_models_free(devcache_cached_model_t *models, size_t n);

/* The cache's share of one device (the host: of RAM), apart from the
 * program's own allocations. */
typedef struct devcache_cache_device_stats {
	uint64_t used;           /* charged to the budget, working memory included */
	uint64_t budget;         /* max_cache_vram (the host: max_cache_ram) */
	uint64_t peak_used;      /* the high-water mark of used */
	uint64_t working_mem;    /* reserved by locks (devcache_model_lock) */
	uint64_t allocated_bytes; /* the cache's blocks in the device's allocator */
	uint64_t reserved_bytes;  /* the allocator's segments that hold them */
	uint64_t device_allocated_bytes; /* the device's allocator altogether: less */
	uint64_t device_reserved_bytes;  /* the cache's share, the program's own */
	uint64_t reserved[8];
} devcache_cache_device_stats_t;

DEVCACHE_API int devcache_cache_device_stats(devcache_ctx_t *ctx, devcache_device_t *dev,
					    devcache_cache_device_stats_t *stats);

/* Evict the model that loading path on dev would find (its key): the
 * cache forgets it at once; an unlocked one's memory is freed now, a
 * locked one's when its last holder releases it (it stays charged until
 * then).  DEVCACHE_ENOENT when the cache does not hold it. */
DEVCACHE_API int devcache_cache_evict(devcache_ctx_t *ctx, const char *path, devcache_device_t *dev);
/* The same for a model the caller holds; the handle stays valid until
 * the caller's devcache_model_release(). */
DEVCACHE_API int devcache_model_evict(devcache_model_t *model);
/* Offload the unlocked model that path names on dev from the device: a
 * whole model to a RAM copy (keep_ram_copy and max_cache_ram must allow
 * it), a partial one's device tensors back to its host part.  Its device
 * memory goes back.  The reverse is a load: a RAM copy is copied back,
 * and devcache_model_make_resident() brings a partial model's tensors.
 * DEVCACHE_EBUSY for a locked model, DEVCACHE_ENOMEM where RAM does not
 * allow the copy, DEVCACHE_EINVAL for a model placed on the host. */
DEVCACHE_API int devcache_cache_offload(devcache_ctx_t *ctx, const char *path,
				       devcache_device_t *dev);
/* Offload or evict unlocked models charged to dev, least recently used
 * first, until bytes are free within its budget and, on a device, in its
 * driver's free memory; *freed_p (if not NULL) gets what was freed.
 * DEVCACHE_ENOMEM, having moved nothing, when even every unlocked model
 * would not make the room. */
DEVCACHE_API int devcache_cache_make_room(devcache_ctx_t *ctx, devcache_device_t *dev,
					 uint64_t bytes, uint64_t *freed_p);
/* One more lock on a model the caller holds, reserving working_mem bytes
 * of its device against other loads (charged to its budget) while it
 * holds: releases give working memory back in the reverse order of the
 * devcache_model_lock() calls that reserved it, one per release.  Room
 * is made as for a load; DEVCACHE_ENOMEM, taking no lock, when it cannot
 * be.  device_working_mem stays the headroom of the default budget. */
DEVCACHE_API int devcache_model_lock(devcache_model_t *model, uint64_t working_mem);
/* A load that places at most device_bytes of the model on dev: the
 * largest prefix of its tensors, in its order, that fits that and the
 * budget; the rest stays on the host, as with partial_loading (which it
 * does not need).  A hit returns the cached model as it is. */
DEVCACHE_API int devcache_model_load_partial(devcache_ctx_t *ctx, const char *path,
					    devcache_device_t *dev, uint64_t device_bytes,
					    const devcache_load_args_t *args,
					    devcache_model_t **model_p);
/* Grow or shrink a partial model's device part to the largest prefix of
 * its tensors, in its order, within device_bytes (charged bytes): tensors
 * past it go back to the host, those in it are made resident as
 * devcache_model_make_resident() makes them.  A fully loaded model is
 * first moved to the host whole (see devcache_model_move_to_host()). */
DEVCACHE_API int devcache_model_set_device_bytes(devcache_model_t *model, uint64_t device_bytes,
						devcache_stream_t stream);

/* ==== Engines (0.1.0): typed metadata, dtypes, alignment, loading into the
 * caller's memory.  See Engines in libdevcache(3). ==================================== */

/* ---- Data types ----------------------------------------------------------
 * Every dtype a model file may hold, as a stable number: GGUF's keep ggml's
 * numbers (enum ggml_type), the other safetensors dtypes count from 1000. */
enum devcache_dtype {
	DEVCACHE_DTYPE_UNKNOWN = -1,
	DEVCACHE_DTYPE_F32 = 0,
	DEVCACHE_DTYPE_F16 = 1,
	DEVCACHE_DTYPE_Q4_0 = 2,
	DEVCACHE_DTYPE_Q4_1 = 3,
	DEVCACHE_DTYPE_Q5_0 = 6,
	DEVCACHE_DTYPE_Q5_1 = 7,
	DEVCACHE_DTYPE_Q8_0 = 8,
	DEVCACHE_DTYPE_Q8_1 = 9,
	DEVCACHE_DTYPE_Q2_K = 10,
	DEVCACHE_DTYPE_Q3_K = 11,
	DEVCACHE_DTYPE_Q4_K = 12,
	DEVCACHE_DTYPE_Q5_K = 13,
	DEVCACHE_DTYPE_Q6_K = 14,
	DEVCACHE_DTYPE_Q8_K = 15,
	DEVCACHE_DTYPE_IQ2_XXS = 16,
	DEVCACHE_DTYPE_IQ2_XS = 17,
	DEVCACHE_DTYPE_IQ3_XXS = 18,
	DEVCACHE_DTYPE_IQ1_S = 19,
	DEVCACHE_DTYPE_IQ4_NL = 20,
	DEVCACHE_DTYPE_IQ3_S = 21,
	DEVCACHE_DTYPE_IQ2_S = 22,
	DEVCACHE_DTYPE_IQ4_XS = 23,
	DEVCACHE_DTYPE_I8 = 24,
	DEVCACHE_DTYPE_I16 = 25,
	DEVCACHE_DTYPE_I32 = 26,
	DEVCACHE_DTYPE_I64 = 27,
	DEVCACHE_DTYPE_F64 = 28,
	DEVCACHE_DTYPE_IQ1_M = 29,
	DEVCACHE_DTYPE_BF16 = 30,
	DEVCACHE_DTYPE_TQ1_0 = 34,
	DEVCACHE_DTYPE_TQ2_0 = 35,
	DEVCACHE_DTYPE_MXFP4 = 39,
	DEVCACHE_DTYPE_NVFP4 = 40,
	DEVCACHE_DTYPE_Q1_0 = 41,
	DEVCACHE_DTYPE_Q2_0 = 42,
	DEVCACHE_DTYPE_BOOL = 1000,
	DEVCACHE_DTYPE_U8 = 1001,
	DEVCACHE_DTYPE_U16 = 1002,
	DEVCACHE_DTYPE_U32 = 1003,
	DEVCACHE_DTYPE_U64 = 1004,
	DEVCACHE_DTYPE_C64 = 1005,
	DEVCACHE_DTYPE_F8_E5M2 = 1006,
	DEVCACHE_DTYPE_F8_E4M3 = 1007,
	DEVCACHE_DTYPE_F8_E8M0 = 1008,
	DEVCACHE_DTYPE_F8_E4M3FNUZ = 1009,
	DEVCACHE_DTYPE_F8_E5M2FNUZ = 1010,
	DEVCACHE_DTYPE_F4 = 1011,
	DEVCACHE_DTYPE_F6_E2M3 = 1012,
	DEVCACHE_DTYPE_F6_E3M2 = 1013
};

/* devcache_dtype_info_t.flags: */
#define DEVCACHE_DTYPE_BLOCKED 0x1u     /* quantised in blocks of block_size elements */
#define DEVCACHE_DTYPE_GGUF 0x2u        /* a GGUF file may hold it */
#define DEVCACHE_DTYPE_SAFETENSORS 0x4u /* a safetensors file may hold it */

typedef struct devcache_dtype_info {
	const char *name;      /* as the files write it: "F32", "Q4_K", "F8_E4M3" */
	uint32_t block_size;   /* elements per block: 1 for F32, 32 for Q4_0, 2 for F4 */
	uint32_t block_bytes;  /* bytes per block: the element size where block_size is 1 */
	uint32_t align;        /* the largest power of two, at most 8, dividing block_bytes */
	uint32_t flags;        /* DEVCACHE_DTYPE_* */
	uint64_t reserved[4];
} devcache_dtype_info_t;

/* DEVCACHE_ENOENT for a number or name that is no dtype. */
DEVCACHE_API int devcache_dtype_describe(enum devcache_dtype dtype, devcache_dtype_info_t *info);
DEVCACHE_API int devcache_dtype_from_name(const char *name, enum devcache_dtype *dtype_p);
/* NULL for a number that is no dtype. */
DEVCACHE_API const char *devcache_dtype_name(enum devcache_dtype dtype);
/* The bytes n elements take (ggml_row_size); DEVCACHE_EINVAL when n is not
 * a whole number of blocks. */
DEVCACHE_API int devcache_dtype_row_size(enum devcache_dtype dtype, uint64_t n, uint64_t *bytes_p);

/* ---- Typed metadata --------------------------------------------------------
 * Metadata by key, each value with its type: GGUF's own types (the same
 * numbers as enum gguf_type), and STRING for safetensors' __metadata__.
 * DEVCACHE_ENOENT: no such key; DEVCACHE_ETYPE: the value has another type
 * (or, for an integer, does not fit the one asked for). */
enum devcache_meta_type {
	DEVCACHE_META_UINT8 = 0,
	DEVCACHE_META_INT8 = 1,
	DEVCACHE_META_UINT16 = 2,
	DEVCACHE_META_INT16 = 3,
	DEVCACHE_META_UINT32 = 4,
	DEVCACHE_META_INT32 = 5,
	DEVCACHE_META_FLOAT32 = 6,
	DEVCACHE_META_BOOL = 7,
	DEVCACHE_META_STRING = 8,
	DEVCACHE_META_ARRAY = 9,
	DEVCACHE_META_UINT64 = 10,
	DEVCACHE_META_INT64 = 11,
	DEVCACHE_META_FLOAT64 = 12
};

/* The index of key for devcache_model_file_metadata(). */
DEVCACHE_API int devcache_model_file_metadata_find(const devcache_model_file_t *mf, const char *key,
						   size_t *index_p);
/* The value's type; an array's element type and length (elem_type_p and
 * count_p may be NULL; a scalar's count is 1, a string's its bytes). */
DEVCACHE_API int devcache_model_file_metadata_type(const devcache_model_file_t *mf,
						   const char *key, enum devcache_meta_type *type_p,
						   enum devcache_meta_type *elem_type_p,
						   uint64_t *count_p);
/* A string: its bytes, NUL-terminated, valid until the file is closed,
 * and their number (len_p may be NULL; the string may hold NUL bytes). */
DEVCACHE_API int devcache_model_file_get_string(const devcache_model_file_t *mf, const char *key,
						const char **value_p, size_t *len_p);
/* Any integer type, where the value fits. */
DEVCACHE_API int devcache_model_file_get_int(const devcache_model_file_t *mf, const char *key,
					     int64_t *value_p);
DEVCACHE_API int devcache_model_file_get_uint(const devcache_model_file_t *mf, const char *key,
					      uint64_t *value_p);
/* FLOAT32 or FLOAT64. */
DEVCACHE_API int devcache_model_file_get_float(const devcache_model_file_t *mf, const char *key,
					       double *value_p);
DEVCACHE_API int devcache_model_file_get_bool(const devcache_model_file_t *mf, const char *key,
					      int *value_p);
/* Elements first to first + count - 1 of an array of numbers or booleans,
 * read from the file into dst as C values of elem_type (uint8_t ... double;
 * a BOOL as one byte, 0 or 1).  elem_type must be the array's. */
DEVCACHE_API int devcache_model_file_get_array(const devcache_model_file_t *mf, const char *key,
					       enum devcache_meta_type elem_type, uint64_t first,
					       uint64_t count, void *dst);
/* Each string of an array of strings, in order, read from the file: fn
 * gets its index, its bytes (NUL-terminated, valid during the call) and
 * their number; a non-zero return stops the walk, and the call then
 * returns DEVCACHE_ECANCELED. */
typedef int (*devcache_meta_string_fn)(void *user, uint64_t index, const char *s, size_t len);
DEVCACHE_API int devcache_model_file_get_strings(const devcache_model_file_t *mf, const char *key,
						 devcache_meta_string_fn fn, void *user);

/* ---- Loading into memory the caller owns -----------------------------------
 * The model cache's fast path (the staging ring of pinned buffers, its
 * reader threads, direct I/O, overlapped copies) into destinations the
 * caller allocated and keeps: the cache neither owns nor counts them. */
typedef struct devcache_tensor_dest {
	const char *name; /* the tensor */
	void *dst;        /* where its bytes go: memory of the device (host memory
			   * for the host device) */
	uint64_t size;    /* bytes at dst: at least the tensor's size */
	int status;       /* out: 0, or why this one failed (DEVCACHE_ENOENT: no such
			   * tensor; DEVCACHE_EINVAL: dst NULL, too small, or named twice) */
	uint32_t reserved32;
	void *reserved[2];
} devcache_tensor_dest_t;

typedef struct devcache_read_args {
	size_t struct_size;       /* sizeof(devcache_read_args_t) */
	unsigned flags;           /* none yet: 0 */
	devcache_progress_fn progress; /* a non-zero return cancels */
	void *progress_user;
	devcache_stream_t stream; /* copies are queued on it; done when the call returns */
	devcache_load_result_t *result; /* NULL, or bytes_read, bytes_uploaded and seconds */
	void *reserved[8];
} devcache_read_args_t;

/* Copy the tensors dests name from mf's files to their dst on dev, byte
 * for byte.  Every dest is checked first: one that fails gets its status
 * and the call fails naming it, before anything is read.  args may be
 * NULL.  DEVCACHE_ECANCELED when progress cancelled it. */
DEVCACHE_API int devcache_model_file_read_tensors(const devcache_model_file_t *mf,
						  devcache_device_t *dev,
						  devcache_tensor_dest_t *dests, size_t n,
						  const devcache_read_args_t *args);

#ifdef __cplusplus
}
#endif
#endif /* DEVCACHE_H */
