/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-cache.h - what the model cache's files share: the staging ring's interface and the memory diagnostics. */
#ifndef DEVCACHE_MODEL_CACHE_H
#define DEVCACHE_MODEL_CACHE_H

#include "internal.h"
#include "list.h"

/* ---- model-cache.c: the cache and its entries ------------------------------------ */

/* Tensors on a device are packed at this alignment: what GPU kernels and
 * vectorised loads expect of a tensor's first byte. */
#define TENSOR_ALIGN ((uint64_t)256)

enum entry_state { ENTRY_LOADING, ENTRY_READY };

/* A file of a model in host memory: its mapping, or a copy of it. */
struct host_map {
	void *p;
	size_t len;
	struct guard_slot *guard; /* its range in the SIGBUS handler's registry (model-guard.c) */
	bool mapped;              /* the file mapped in place, not a copy */
};

/* One cached model: a file or a set placed on one device, writable or not.
 * Its key is the device, the flag and every file's identity (mf's). */
struct devcache_model {
	struct model_cache *cache;
	devcache_device_t *dev;
	bool writable;
	uint32_t align;        /* devcache_load_args_t.align on the host, part of the key; 0 */

	devcache_model_file_t *mf;
	struct host_map *maps; /* host placement: one per file, NULL otherwise */
	/* With align (model-place.c): the tensors of the mapping that are not
	 * aligned to it, each copied into aligned, or NULL. */
	void **aligned;
	void *aligned_block;
	size_t aligned_len;
	/* Device placement (model-chunks.c): the layout, in one allocation or
	 * in several within the device's largest single allocation. */
	struct dev_chunk *chunks;
	size_t n_chunks;
	uint64_t *dev_offsets; /* each tensor's offset in the layout */
	uint32_t *dev_chunk;   /* each tensor's chunk */
	void *ram_copy;        /* evicted from its device, kept in RAM (keep_ram_copy) */
	uint64_t bytes;        /* charged against the budget (a partial load: its device's) */
	/* Partial residency (model-partial.c), only with partial: each tensor
	 * in an allocation of its own or on the host, where maps has every
	 * file; host_charge, charged to RAM, is its host part: the files'
	 * size where they are copied (mmap false), the bytes of the tensors
	 * on the host where they are mapped (host_mapped), as the pages of
	 * the others are not read. */
	bool partial, host_mapped;
	void **dev_ptr;        /* each tensor's allocation, NULL while on the host */
	uint64_t *stamp;       /* each device tensor's last use, by the cache's clock */
	uint64_t host_charge;
	uint64_t read, uploaded; /* by its load, for the statistics */
	int locks;             /* loads not yet released */
	/* Working memory of its locks (devcache_model_lock), latest last,
	 * charged to its device's budget; working_total is their sum. */
	uint64_t *working;
	size_t n_working, working_cap;
	uint64_t working_total;
	bool forgotten;        /* evicted while locked: on the gone list, freed at its last release */
	uint64_t hits;
	double last_use;       /* CLOCK_MONOTONIC seconds */
	enum entry_state state;
	pthread_t loader;      /* the thread that set ENTRY_LOADING */
	struct devcache_model *prev, *next; /* most recently used first */
};

struct model_cache {
	devcache_ctx_t *ctx;
	pthread_mutex_t lock;
	pthread_cond_t ready; /* an entry left the loading state */
	struct devcache_model *head, *tail;
	struct devcache_model *gone_head, *gone_tail; /* forgotten while locked */
	uint64_t ram_used, ram_budget;
	uint64_t *vram_used, *vram_budget; /* by device index */
	uint64_t *vram_peak;               /* high-water marks; RAM's is in stats */
	devcache_cache_stats_t stats;
	uint64_t clock;       /* ticks at each use of a partial model's tensors */
};

bool mc_is_host(const devcache_device_t *dev);
size_t mc_dev_index(const struct model_cache *c, const devcache_device_t *dev);
/* What a device's budget counts (RAM for the host), and the budget. */
uint64_t *mc_used_of(struct model_cache *c, const devcache_device_t *dev);
uint64_t mc_budget_of(struct model_cache *c, const devcache_device_t *dev);
/* Evict unlocked models charged to dev, least recently used first, until
 * need bytes fit its budget or, with need 0, until want bytes are freed.
 * Called with the cache locked; returns the bytes freed. */
uint64_t mc_evict_for(struct model_cache *c, devcache_device_t *dev, uint64_t need,
		      uint64_t want);

/* Drop m from the cache altogether.  Called with the cache locked. */
void mc_drop(struct model_cache *c, struct devcache_model *m);
/* Evict m from where it is: a RAM copy where keep_ram_copy and the RAM
 * budget allow, dropped otherwise.  Called with the cache locked. */
void mc_evict(struct model_cache *c, struct devcache_model *m);
/* Copy a device model into RAM and give its device memory back: 0, or
 * DEVCACHE_ENOMEM (no message) where keep_ram_copy or the RAM budget does
 * not allow it, or the copy's error (logged as a warning too). */
int mc_keep_in_ram(struct model_cache *c, struct devcache_model *m);
/* The cache forgets m, which is locked: off the list, freed (and its
 * charge taken back) at its last release.  Called with the cache locked. */
void mc_forget(struct model_cache *c, struct devcache_model *m);
/* Its last release: free a forgotten m.  Called with the cache locked. */
void mc_free_forgotten(struct model_cache *c, struct devcache_model *m);
/* Raise the high-water marks to the charges now.  Called with the cache
 * locked after any charge grows. */
void mc_peaks(struct model_cache *c);
/* What unlocked, ready models charged to dev would free if evicted. */
uint64_t mc_evictable(struct model_cache *c, const devcache_device_t *dev);
double mc_now(void);
/* The list, most recently used first.  Called with the cache locked. */
void mc_lru_unlink(struct model_cache *c, struct devcache_model *m);
void mc_lru_push_front(struct model_cache *c, struct devcache_model *m);
/* Charge m where it counts (a partial model: its host side to RAM too),
 * or take the charge back.  Called with the cache locked. */
void mc_charge(struct model_cache *c, const struct devcache_model *m);
void mc_uncharge(struct model_cache *c, const struct devcache_model *m);
/* Free a device allocation of m of size bytes (as asked): back to the
 * driver, unless keep_freed_vram keeps it in the allocator's cache; a
 * failure is logged, as nothing else can be done. */
void mc_dev_free(const struct devcache_model *m, void *p, uint64_t size);
/* Give back what an entry holds; the caller has unlinked and uncharged it. */
void mc_entry_free(struct devcache_model *m);

/* What log_memory_usage reports, before and after a load or an eviction. */
struct mem_use {
	uint64_t rss, cached, heap;
};

/* Called with the cache locked. */
/* The page-cache figure counts the cached models' files and also's (an
 * evicted model's, still open; NULL: none). */
void mc_mem_use(struct model_cache *c, const devcache_model_file_t *also, struct mem_use *u);
void mc_log_mem_use(struct model_cache *c, const char *what, const char *path,
		    const devcache_model_file_t *also, const struct mem_use *before);

/* ---- model-load.c ----------------------------------------------------------------- */

/* The cached, ready model that loading path on dev would find (either
 * DEVCACHE_LOAD_WRITABLE flag): by the files' identity, else parsed,
 * with the cache unlocked meanwhile.  DEVCACHE_ENOENT when there is
 * none, DEVCACHE_EBUSY while it loads.  Called with the cache locked. */
int mc_find_key(struct model_cache *c, const char *path, devcache_device_t *dev,
		struct devcache_model **m_p);

/* model-load.c: the monotonic clock in seconds, for the results' times. */
double mc_now_seconds(void);

/* ---- model-place.c: a new model's bytes on the host or a device ------------------ */

/* Every file of m in host memory: mapped in place, or copied (mmap false). */
int mc_place_on_host(struct devcache_model *m, const devcache_load_args_t *args);
/* The bytes of the tensors of mf whose file offset is not a multiple of
 * align (0 and 1: none), and how many (count_p may be NULL): what a host
 * placement with that alignment copies. */
uint64_t mc_unaligned_bytes(const devcache_model_file_t *mf, uint32_t align, uint64_t *count_p);
/* Where host tensor i of m is: its aligned copy, or its file's mapping. */
void *mc_host_tensor(const struct devcache_model *m, size_t i);
/* Give back the aligned copies. */
void mc_aligned_free(struct devcache_model *m);
/* m's tensors uploaded to its device through the staging ring. */
int mc_place_on_device(struct devcache_model *m, const devcache_load_args_t *args);
/* The stage_file of each of mf's files, to free; NULL without memory. */
struct stage_file *mc_stage_files(const devcache_model_file_t *mf);
/* A failed upload's message names the file as well as the device. */
int mc_upload_failed(const struct devcache_model *m, int rc);

/* ---- model-guard.c: mapped files that another process changes ------------------- */

struct guard_slot;

/* Register hm's new mapping of f, mapped with protection prot, with the
 * process's SIGBUS handler (installed at the first call): a fault in it
 * then reads zeros and marks the file changed. */
int guard_add(const devcache_model_file_t *f, struct host_map *hm, int prot);
/* Take hm's mapping out of the registry; before it is unmapped. */
void guard_remove(struct host_map *hm);
/* DEVCACHE_EIO, naming the file, where file part of m (any file of m)
 * changed under its mapping: a fault answered, or a size or modification
 * time other than the loaded one; 0 otherwise, and for copies. */
int guard_check_part(const struct devcache_model *m, size_t part);
int guard_check(const struct devcache_model *m);
/* Whether a file of a ready m changed so: m is then never a hit. */
bool guard_changed(const struct devcache_model *m);
/* The context's model cache, made on first use. */
int mc_get_cache(devcache_ctx_t *ctx, struct model_cache **c_p);

/* ---- model-chunks.c: a model in one device allocation or several ------------------ */

struct dev_chunk;

/* The device layout rule: tensors packed at TENSOR_ALIGN in file order.
 * Fills offsets (when not NULL) and returns the bytes the layout takes. */
uint64_t device_layout(const devcache_model_file_t *mf, uint64_t *offsets);
/* Lay m's tensors out and cut the layout into chunks of at most limit
 * bytes, between tensors; DEVCACHE_ENOTSUP, naming it, for a tensor
 * larger than limit.  Allocates nothing on the device. */
int chunks_plan(struct devcache_model *m, uint64_t limit);
/* DEVCACHE_ENOTSUP: tensor i of m is larger than limit, the device's
 * largest single allocation (the message names both). */
int mc_tensor_too_large(const struct devcache_model *m, size_t i, uint64_t limit);
/* Allocate every chunk on m's device; on failure none stays allocated. */
int chunks_alloc(struct devcache_model *m, devcache_stream_t stream);
/* Free the chunks' device memory, keeping the plan (keep_ram_copy). */
void chunks_release(struct devcache_model *m);
/* Free the device memory and the plan. */
void chunks_free(struct devcache_model *m);
bool chunks_on_device(const struct devcache_model *m);
/* Chunk k's allocation, NULL while not on the device. */
void *chunks_base(const struct devcache_model *m, size_t k);
/* Where tensor index lies on the device. */
void *chunks_tensor(const struct devcache_model *m, size_t index);
/* Copy the whole layout between the device and ram (m->bytes long). */
int chunks_copy_out(const struct devcache_model *m, void *ram);
int chunks_copy_in(const struct devcache_model *m, const void *ram, devcache_stream_t stream);

/* ---- model-partial.c: models larger than the device's budget ------------------------ */

/* What a tensor of size bytes is charged on a device. */
static inline uint64_t tensor_charge(uint64_t size)
{
	return (size + TENSOR_ALIGN - 1) & ~(TENSOR_ALIGN - 1);
}

/* Choose the tensors that fit in avail bytes, in tensor order, skipping
 * those that do not (prefix: up to the first that does not); sets
 * m->partial, its arrays, m->bytes and m->host_charge.  Called with the
 * cache locked. */
int partial_plan(struct model_cache *c, struct devcache_model *m, uint64_t avail, bool prefix);
/* Place a planned partial load: the files on the host, the chosen
 * tensors uploaded.  Unlocked. */
int partial_place(struct devcache_model *m, const devcache_load_args_t *args);
/* A whole model on a device becomes a partial one with every tensor on
 * the host (its files mapped, or copied where mmap is false, charged to
 * RAM as partial models are), its device memory given back.  Called with
 * the cache locked and m ready; unlocks it meanwhile, m loading. */
int partial_from_whole(struct model_cache *c, struct devcache_model *m);
/* Every device tensor of a partial model back to the host.  Locked. */
void partial_offload(struct model_cache *c, struct devcache_model *m);
/* Give back the device allocations of a partial model. */
void partial_free(struct devcache_model *m);
/* Where tensor i is, for devcache_model_tensor_at(). */
void *partial_tensor(const struct devcache_model *m, size_t i, uint32_t *place_p);
/* The model's tensor bytes on its device. */
uint64_t partial_device_bytes(const struct devcache_model *m, size_t *count_p);

/* ---- staging.c: streaming file ranges to a device through pinned buffers ---- */

/* A file to read from. */
struct stage_file {
	const char *path; /* for messages */
	int fd;
};

/* A run of bytes to copy from a file to the device.  Items come sorted by
 * file, then by offset, and do not overlap. */
struct stage_item {
	size_t file;     /* index into the files */
	uint64_t offset; /* in the file */
	uint64_t size;
	char *dst;       /* on the device */
};

struct stage_job {
	devcache_device_t *dev;
	const struct stage_file *files;
	size_t n_files;
	const struct stage_item *items;
	size_t n_items;
	devcache_stream_t stream;
	devcache_progress_fn progress; /* called on the calling thread only */
	void *progress_user;
	const char *name;              /* the model, for messages */
	uint64_t bytes_read;           /* out: read from the files (with any gaps) */
	uint64_t bytes_uploaded;       /* out: the items' bytes copied to the device */
};

/* Read the items' bytes into a ring of staging_buffers pinned buffers of
 * staging_buffer_size, load_workers threads at once (the caller among them),
 * copying each filled buffer to the device on job->stream; returns once the
 * stream has finished.  0, DEVCACHE_ECANCELED, or an error naming the file. */
int stage_upload(struct stage_job *job);

/* ---- memdiag.c: what log_memory_usage reports ---------------------------------- */

/* The process's resident set, in bytes. */
uint64_t memdiag_rss(void);
/* Bytes of the file (fd, size bytes) in the page cache, by mincore(). */
uint64_t memdiag_cached(int fd, uint64_t size);
/* glibc's heap: arena plus mmapped blocks. */
uint64_t memdiag_heap(void);

#endif
