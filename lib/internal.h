/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* internal.h - declarations shared by the parts of the library, never installed. */
#ifndef DEVCACHE_INTERNAL_H
#define DEVCACHE_INTERNAL_H

#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>

#include <devcache.h>
#include <devcache-backend.h>

#include "module-tunables.h"
#include "tunables.h"

/* ---- i18n --------------------------------------------------------------- */
const char *i18n_gettext(const char *msgid) __attribute__((format_arg(1)));
#define _(s) i18n_gettext(s)
/* The form of a message for the count n: one, or many (languages have more). */
const char *i18n_ngettext(const char *one, const char *many, unsigned long n)
	__attribute__((format_arg(1))) __attribute__((format_arg(2)));
#define P_(one, many, n) i18n_ngettext(one, many, n)
#ifndef N_
#define N_(s) s
#endif

/* ---- errors ------------------------------------------------------------- */
/* Set this thread's detail message and return code.  Every string
 * argument is shown safely (utf8_show) and bounded so that the format's own
 * words survive whatever names are put in (the note in error.c). */
int err_set(int code, const char *fmt, ...) DEVCACHE_PRINTF(2, 3);
int err_setv(int code, const char *fmt, va_list ap) DEVCACHE_PRINTF(2, 0);
/* DEVCACHE_ENOMEM, "out of memory": the one spelling of that error. */
int err_oom(void);
void err_clear(void);
/* Format as err_set does, into buf[size] (size > 0), for a message that a
 * later err_set quotes ("%s: %s", path, why); returns its length.  Use
 * these, not snprintf, for any text that carries a name from input. */
size_t err_format(char *buf, size_t size, const char *fmt, ...) DEVCACHE_PRINTF(3, 4);
size_t err_vformat(char *buf, size_t size, const char *fmt, va_list ap) DEVCACHE_PRINTF(3, 0);
/* Likewise for the log and the summaries: shown safely, only the whole
 * bounded (a line of a summary keeps its path whole where it fits). */
size_t msg_format(char *buf, size_t size, const char *fmt, ...) DEVCACHE_PRINTF(3, 4);
size_t msg_vformat(char *buf, size_t size, const char *fmt, va_list ap) DEVCACHE_PRINTF(3, 0);

/* ---- logging ------------------------------------------------------------ */
struct log_entry {
	enum devcache_log_level level;
	char *text;
};

struct log_state {
	pthread_mutex_t lock;
	devcache_log_fn fn;
	void *user;
	int level;              /* the log_level tunable */
	bool deferring;         /* while opening: queue until log_level is known */
	struct log_entry *queue;
	size_t queued, queue_cap;
};

void log_init(struct log_state *log, devcache_log_fn fn, void *user);
void log_destroy(struct log_state *log);
void log_msg(struct log_state *log, enum devcache_log_level level, const char *fmt, ...)
	DEVCACHE_PRINTF(3, 4);
void log_msgv(struct log_state *log, enum devcache_log_level level, const char *fmt,
	      va_list ap) DEVCACHE_PRINTF(3, 0);
/* Stop deferring: pass the queued messages at or below level on, drop the rest. */
void log_flush(struct log_state *log, int level);
void log_default_handler(void *user, enum devcache_log_level level, const char *msg);
const char *log_level_name(enum devcache_log_level level);

/* ---- config ------------------------------------------------------------- */

/* The sources devcache_open reads, named explicitly so tests can point them
 * anywhere. NULL members are skipped. */
struct config_sources {
	const char *system_file;  /* missing: skipped */
	const char *user_file;    /* missing: skipped */
	const char *conf_file;    /* DEVCACHE_CONF: missing is an error */
	const char *backend_path; /* DEVCACHE_BACKEND_PATH */
	const char *torch_options; /* PYTORCH_CUDA_ALLOC_CONF: the torch entry points only */
	bool torch_no_caching;     /* PYTORCH_NO_CUDA_MEMORY_CACHING is set: likewise */
	const char *env_options;  /* DEVCACHE_OPTIONS */
	const char *options;      /* devcache_open's string */
};

/* Caps on what outside input can make the parser read, documented in
 * devcache.conf(5): generous for any real setting, small enough that a
 * hostile string or file costs no noticeable time or memory. */
#define CONFIG_OPTIONS_MAX (1u << 20) /* bytes in an option string */
#define CONFIG_FILE_MAX (1u << 20)    /* bytes in a configuration file */

int config_apply_string(struct tunable_set *set, const char *text, const char *source,
			struct log_state *log);
int config_apply_file(struct tunable_set *set, const char *path, bool must_exist,
		      struct log_state *log, config_report_fn report, void *user);
int config_apply_sources(struct tunable_set *set, const struct config_sources *src,
			 struct log_state *log);
/* Fill src from the environment; *user_p is the user file's path, to
 * free.  DEVCACHE_ENOMEM where that path cannot be made. */
int config_sources_from_env(struct config_sources *src, char **user_p);
void config_warn_unknown_env(struct log_state *log);

/* ---- context, backends, devices ----------------------------------------- */
struct backend;

struct allocator;
struct trace;
struct model_cache;

struct devcache_device {
	devcache_ctx_t *ctx;
	struct backend *backend;
	int ordinal;
	char id[32];
	devcache_backend_device_t info;
	struct allocator *alloc;  /* device memory */
	struct allocator *pinned; /* pinned host memory for this device */
};

#define DEVCACHE_MAX_PRESSURE 16

struct pressure_cb {
	devcache_pressure_fn fn;
	void *user;
};

/* devcache_open_ex, and with torch_options (PYTORCH_CUDA_ALLOC_CONF, or NULL)
 * and torch_no_caching (PYTORCH_NO_CUDA_MEMORY_CACHING is set) applied
 * between DEVCACHE_BACKEND_PATH and DEVCACHE_OPTIONS: the torch entry
 * points' process-wide context (torch.c). */
int context_open(devcache_ctx_t **ctx_p, const devcache_open_args_t *args,
		 const char *torch_options, bool torch_no_caching);

struct devcache_ctx {
	struct log_state log;
	struct tunable_set tun;
	char *tun_text[TUN_COUNT]; /* each value formatted, for backends */
	struct module_tunables mod_tun; /* those the loaded modules declare */
	struct backend **backends;
	size_t n_backends;
	struct devcache_device *devices;
	size_t n_devices;
	pthread_mutex_t lock; /* pressure callbacks, the shared trace */
	struct pressure_cb pressure[DEVCACHE_MAX_PRESSURE];
	size_t n_pressure;
	struct trace **traces; /* open allocation traces, shared by file name */
	size_t n_traces;
	uint64_t trace_ids;    /* allocation IDs in traces, unique per context; atomic */
	struct model_cache *cache; /* made at the first use, under lock */
};

/* model-cache.c: drop every cached model (before the allocators stop). */
void model_cache_destroy(devcache_ctx_t *ctx);

/* The largest single allocation the device's driver makes: its
 * max_alloc_size, or total_memory where it sets no limit below that (a
 * module of backend ABI minor 0 could not say). */
uint64_t device_max_alloc(const devcache_device_t *dev);
/* The largest request the device's allocator serves: segments are no
 * larger than the driver makes, unless expandable segments map pages
 * (alloc-life.c, where the allocator decides it). */
size_t alloc_max_request(const devcache_device_t *dev);
/* Free ptr (size bytes, as asked) and give its segment back to the
 * driver where that leaves it wholly free (alloc-miss.c). */
int alloc_free_to_driver(devcache_device_t *dev, void *ptr, size_t size);
/* The blocks at ptrs (n of them) in dev's allocator: their bytes as
 * rounded, and those of the segments that hold them, each counted once
 * (alloc-stats.c). */
int alloc_share(devcache_device_t *dev, void *const *ptrs, size_t n, uint64_t *allocated_p,
		uint64_t *reserved_p);
/* Create and destroy the allocators of every device. */
int devices_start_allocators(devcache_ctx_t *ctx);
void devices_stop_allocators(devcache_ctx_t *ctx);
/* Destroy an event the core made; a driver that refuses is reported, as
 * nothing else can be done: the event is lost to the process. */
void device_event_destroy(devcache_device_t *dev, void *event);

int backends_load(devcache_ctx_t *ctx);
void backends_unload(devcache_ctx_t *ctx);
/* Without a context: check set's pending pairs against the tunables of
 * the modules in path (NULL: set's backend_path), as
 * devcache_config_check_file does. */
int backends_check_config(struct tunable_set *set, const char *path, struct log_state *log,
			  config_report_fn report, void *user);

const struct devcache_backend_ops *host_backend_ops(void);

#endif
