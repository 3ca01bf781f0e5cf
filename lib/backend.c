/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* backend.c - find, select, load and check backend modules; start the built-in host backend. */
#include "backend-call.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Every entry a backend must provide, checked after its init. */
#define MANDATORY_ENTRIES(X)                                                                    \
	X(init) X(fini) X(device_info) X(mem_get_info) X(mem_alloc) X(mem_free) X(host_alloc)     \
	X(host_free) X(memcpy_htod) X(memcpy_dtoh) X(stream_create) X(stream_destroy)             \
	X(stream_synchronize) X(event_create) X(event_destroy) X(event_record) X(event_query)     \
	X(event_synchronize)
#define VMM_ENTRIES(X)                                                                          \
	X(vm_granularity) X(vm_reserve) X(vm_release) X(vm_create) X(vm_destroy) X(vm_map)        \
	X(vm_unmap)

#define RETURN_IF_MISSING(f)                                                                    \
	if (!ops->f)                                                                             \
		return #f;

static const char *missing_mandatory(const struct devcache_backend_ops *ops)
{
	MANDATORY_ENTRIES(RETURN_IF_MISSING)
	return NULL;
}

static const char *missing_vmm(const struct devcache_backend_ops *ops)
{
	VMM_ENTRIES(RETURN_IF_MISSING)
	return NULL;
}

/* ---- what the core offers a backend -------------------------------------- */

static void host_log(void *cookie, enum devcache_log_level level, const char *fmt, ...)
	DEVCACHE_PRINTF(3, 4);

static void host_log(void *cookie, enum devcache_log_level level, const char *fmt, ...)
{
	struct backend *be = cookie;
	char text[1536];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	log_msg(&be->ctx->log, level, "%s: %s", be->name, text);
}

static const char *host_tunable(void *cookie, const char *name)
{
	struct backend *be = cookie;
	int id = name ? tunable_find(name) : -1;
	const struct module_tunable *t;

	if (id >= 0)
		return be->ctx->tun_text[id];
	t = name ? module_tunables_find(&be->ctx->mod_tun, name) : NULL;
	return t ? t->text : NULL;
}

/* ---- records -------------------------------------------------------------- */

static struct backend *backend_new(devcache_ctx_t *ctx, const char *name, const char *path)
{
	struct backend *be = calloc(1, sizeof *be);
	struct backend **grown = realloc(ctx->backends, (ctx->n_backends + 1) * sizeof *grown);

	if (grown)
		ctx->backends = grown;
	if (!be || !grown || !(be->name = strdup(name)) || !(be->path = strdup(path))) {
		if (be) {
			free(be->name);
			free(be);
		}
		err_oom();
		return NULL;
	}
	be->ctx = ctx;
	be->host = (struct devcache_backend_host){
		.abi_version = DEVCACHE_BACKEND_ABI_VERSION,
		.abi_minor = DEVCACHE_BACKEND_ABI_MINOR,
		.cookie = be,
		.log = host_log,
		.tunable = host_tunable,
		.error = err_set,
	};
	ctx->backends[ctx->n_backends++] = be;
	return be;
}

static void set_status(struct backend *be, enum devcache_backend_status status, const char *fmt,
		       ...) DEVCACHE_PRINTF(3, 4);

static void set_status(struct backend *be, enum devcache_backend_status status, const char *fmt,
		       ...)
{
	va_list ap;

	free(be->reason);
	va_start(ap, fmt);
	if (vasprintf(&be->reason, fmt, ap) < 0)
		be->reason = NULL;
	va_end(ap);
	be->status = status;
	if (status != DEVCACHE_BACKEND_LOADED)
		log_msg(&be->ctx->log, DEVCACHE_LOG_DEBUG, _("backend %s (%s): %s"), be->name,
			be->path, be->reason ? be->reason : "");
}

static void backend_stop(struct backend *be)
{
	if (be->ops && be->state)
		bk_fini(be);
	be->state = NULL;
	be->ops = NULL;
	be->opened = NULL;
	if (be->dl)
		dlclose(be->dl);
	be->dl = NULL;
}

/* *added_p: false when the backend could not describe the device, which
 * is then skipped; the error is the core's running out of memory. */
static int add_device(devcache_ctx_t *ctx, struct backend *be, int ordinal, bool *added_p)
{
	struct devcache_device *grown = realloc(ctx->devices, (ctx->n_devices + 1) * sizeof *grown);

	if (!grown)
		return err_oom();
	ctx->devices = grown;
	struct devcache_device *dev = &ctx->devices[ctx->n_devices];
	memset(dev, 0, sizeof *dev);
	int rc = bk_device_info(be, ordinal, &dev->info);
	if (rc) {
		log_msg(&ctx->log, DEVCACHE_LOG_WARNING, _("backend %s: device %d skipped: %s"),
			be->name, ordinal, devcache_last_error());
		return 0;
	}
	*added_p = true;
	dev->info.name[sizeof dev->info.name - 1] = '\0';
	dev->info.pci_bus_id[sizeof dev->info.pci_bus_id - 1] = '\0';
	/* The core never calls an optional entry a device cannot back. */
	const char *gap;
	if ((dev->info.caps & DEVCACHE_CAP_VMM) && (gap = missing_vmm(be->ops))) {
		log_msg(&ctx->log, DEVCACHE_LOG_DEBUG,
			_("backend %s: virtual-memory capability ignored: no %s entry"), be->name, gap);
		dev->info.caps &= ~(uint64_t)DEVCACHE_CAP_VMM;
	}
	dev->ctx = ctx;
	dev->backend = be;
	dev->ordinal = ordinal;
	if (strcmp(be->name, "host") == 0)
		snprintf(dev->id, sizeof dev->id, "host");
	else
		snprintf(dev->id, sizeof dev->id, "%s:%d", be->name, ordinal);
	ctx->n_devices++;
	return 0;
}

/* Initialise, check, and enumerate; a failure of the backend makes it
 * unavailable, never the context.  The core's own running out of memory
 * fails the context (DEVCACHE_ENOMEM): a context without a device that is
 * there, saying nothing, would be worse. */
static int backend_start(devcache_ctx_t *ctx, struct backend *be,
			 const struct devcache_backend_ops *ops)
{
	char why[512] = "";
	const char *missing;
	int n = 0, rc;

	if (!ops->init || !ops->fini) {
		set_status(be, DEVCACHE_BACKEND_UNAVAILABLE, _("missing mandatory entry %s"),
			   ops->init ? "fini" : "init");
		return 0;
	}
	err_clear();
	rc = ops->init(&be->host, &be->state, &n, why, sizeof why);
	if (rc) {
		set_status(be, DEVCACHE_BACKEND_UNAVAILABLE, _("initialisation failed: %s"),
			   *devcache_last_error() ? devcache_last_error() : devcache_strerror(rc));
		return 0;
	}
	be->ops = ops;
	if ((missing = missing_mandatory(ops))) {
		set_status(be, DEVCACHE_BACKEND_UNAVAILABLE, _("missing mandatory entry %s"), missing);
		backend_stop(be);
		return 0;
	}
	if (n < 0) {
		set_status(be, DEVCACHE_BACKEND_UNAVAILABLE, _("init reported %d devices"), n);
		backend_stop(be);
		return 0;
	}
	be->status = DEVCACHE_BACKEND_LOADED;
	/* With devices, what init says is what they lack (a device that cannot
	 * map memory, and why), for devcache info. */
	if (n == 0 || *why)
		set_status(be, DEVCACHE_BACKEND_LOADED, "%s", *why ? why : _("no device found"));
	for (int i = 0; i < n; i++) {
		bool added = false;

		if ((rc = add_device(ctx, be, i, &added)))
			return rc;
		be->n_devices += added;
	}
	log_msg(&ctx->log, DEVCACHE_LOG_DEBUG, P_("backend %s (%s): loaded, %d device%s%s", "backend %s (%s): loaded, %d devices%s%s",
		   (unsigned long)be->n_devices),
		be->name, be->path, be->n_devices, be->reason ? ": " : "",
		be->reason ? be->reason : "");
	return 0;
}

/* Open the module and check what it declares; be->opened is set when it
 * may be started.  Its tunables go to mt.  Only the core's running out of
 * memory is an error: anything wrong with the module makes it unavailable. */
static int backend_open(struct backend *be, struct module_tunables *mt)
{
	devcache_backend_entry_fn entry;
	const struct devcache_backend_ops *ops;
	struct stat st;
	char why[512];
	int rc = 0;

	/* dlopen() would wait in open() for a FIFO's writer, and read a
	 * device without end: a module is a regular file, or a link to one.
	 * What cannot be stat()ed is left for dlopen() to explain. */
	if (stat(be->path, &st) == 0 && !S_ISREG(st.st_mode)) {
		set_status(be, DEVCACHE_BACKEND_UNAVAILABLE, _("not a regular file"));
		log_msg(&be->ctx->log, DEVCACHE_LOG_WARNING, _("backend %s (%s): %s"), be->name,
			be->path, be->reason ? be->reason : "");
		return 0;
	}
	dlerror();
	be->dl = dlopen(be->path, RTLD_NOW | RTLD_LOCAL);
	if (!be->dl) {
		set_status(be, DEVCACHE_BACKEND_UNAVAILABLE, _("cannot load module: %s"), dlerror());
		return 0;
	}
	*(void **)&entry = dlsym(be->dl, DEVCACHE_BACKEND_ENTRY);
	if (!entry || !(ops = entry())) {
		set_status(be, DEVCACHE_BACKEND_UNAVAILABLE,
			   _("not a libdevcache backend module (no %s)"), DEVCACHE_BACKEND_ENTRY);
	} else if (ops->abi_version != DEVCACHE_BACKEND_ABI_VERSION) {
		set_status(be, DEVCACHE_BACKEND_UNAVAILABLE,
			   _("built for backend ABI %u, but this libdevcache uses ABI %u"),
			   ops->abi_version, DEVCACHE_BACKEND_ABI_VERSION);
	} else if (!ops->name || strcmp(ops->name, be->name) != 0) {
		set_status(be, DEVCACHE_BACKEND_UNAVAILABLE,
			   _("the module calls itself '%s', not '%s'"), ops->name ? ops->name : "",
			   be->name);
	} else if ((rc = module_tunables_declare(mt, be->name, ops->tunables, why, sizeof why))) {
		if (rc == DEVCACHE_ENOMEM)
			err_set(rc, _("backend %s (%s): %s"), be->name, be->path, why);
		else
			set_status(be, DEVCACHE_BACKEND_UNAVAILABLE, _("malformed declaration: %s"),
				   why);
	} else {
		be->opened = ops;
		return 0;
	}
	backend_stop(be);
	return rc == DEVCACHE_ENOMEM ? rc : 0;
}

static int backend_run(devcache_ctx_t *ctx, struct backend *be)
{
	int rc = be->opened ? backend_start(ctx, be, be->opened) : 0;

	if (be->status != DEVCACHE_BACKEND_LOADED)
		backend_stop(be);
	return rc;
}

/* ---- discovery and selection ---------------------------------------------- */

struct found {
	char *name, *path;
};

static bool valid_module_name(const char *s, size_t len)
{
	if (len == 0 || len > 24)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	return strncmp(s, "host", len) != 0 || len != 4;
}

static int found_cmp(const void *a, const void *b)
{
	const struct found *x = a, *y = b;

	return strcmp(x->name, y->name);
}

/* Higher priority first; a module that failed to open goes last. */
static int priority_cmp(const void *a, const void *b)
{
	const struct backend *x = *(struct backend *const *)a, *y = *(struct backend *const *)b;

	if (!x->opened != !y->opened)
		return x->opened ? -1 : 1;
	if (x->opened && x->opened->priority != y->opened->priority)
		return x->opened->priority > y->opened->priority ? -1 : 1;
	return strcmp(x->name, y->name);
}

static struct found *find_found(struct found *f, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(f[i].name, name) == 0)
			return &f[i];
	return NULL;
}

/* Modules are NAME.so in the directories of backend_path; the first wins. */
static int scan(const char *pathlist, struct found **out, size_t *n_out)
{
	struct found *f = NULL;
	size_t n = 0;
	char *copy = strdup(pathlist), *save = NULL;
	int rc;

	if (!copy)
		return err_oom();
	for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		DIR *d = opendir(dir);
		struct dirent *e;

		/* A folder that is not there holds no module; one that cannot
		 * be read for want of memory or descriptors is an error, not
		 * a folder without modules. */
		if (!d && errno != ENOENT && errno != ENOTDIR && errno != EACCES) {
			int err = errno;

			rc = err_set(err == ENOMEM ? DEVCACHE_ENOMEM : DEVCACHE_EIO,
				     _("%s: cannot read the folder: %s"), dir, strerror(err));
			goto fail;
		}
		if (!d)
			continue;
		while ((e = readdir(d))) {
			size_t len = strlen(e->d_name);

			if (len < 4 || strcmp(e->d_name + len - 3, ".so") != 0 ||
			    !valid_module_name(e->d_name, len - 3))
				continue;
			char *name = strndup(e->d_name, len - 3), *path = NULL;
			struct found *grown = realloc(f, (n + 1) * sizeof *f);

			if (grown)
				f = grown;
			if (!name || !grown || asprintf(&path, "%s/%s", dir, e->d_name) < 0) {
				free(name);
				closedir(d);
				goto nomem;
			}
			if (find_found(f, n, name)) {
				free(name);
				free(path);
				continue;
			}
			f[n++] = (struct found){name, path};
		}
		closedir(d);
	}
	free(copy);
	if (n > 1) /* qsort(NULL, 0) is undefined */
		qsort(f, n, sizeof *f, found_cmp);
	*out = f;
	*n_out = n;
	return 0;
nomem:
	rc = err_oom();
fail:
	free(copy);
	for (size_t i = 0; i < n; i++)
		free(f[i].name), free(f[i].path);
	free(f);
	return rc;
}

static bool listed(const struct tunable_list *sel, const char *name, bool excluded)
{
	for (size_t i = 0; i < sel->n_items; i++) {
		const char *item = sel->items[i];

		if ((item[0] == '^') == excluded && strcmp(item + excluded, name) == 0)
			return true;
	}
	return false;
}

/* The pairs no loaded module's tunable took. */
static int leftover(struct backend **bes, size_t n, struct tunable_set *set,
		    const struct module_tunables *mt, struct log_state *log,
		    config_report_fn report, void *user)
{
	const char **names = calloc(n + 1, sizeof *names);
	size_t k = 0;
	int rc;

	if (!names)
		return err_oom();
	for (size_t i = 0; i < n; i++)
		if (!bes[i]->opened && !bes[i]->ops)
			names[k++] = bes[i]->name;
	rc = module_tunables_leftover(set, mt, names, k, log, report, user);
	free(names);
	return rc;
}

static int load_selected(devcache_ctx_t *ctx, struct found *f, size_t n)
{
	const struct tunable_list backends = tun_get(&ctx->tun, backends), *sel = &backends;
	const char *path = ctx->tun_text[TUN_backend_path];
	bool any_positive = false;
	struct backend *be;
	int rc;

	for (size_t i = 0; i < sel->n_items; i++)
		any_positive = any_positive || sel->items[i][0] != '^';
	if (listed(sel, "host", true))
		log_msg(&ctx->log, DEVCACHE_LOG_WARNING,
			_("the host backend is built in and cannot be excluded"));
	/* Named backends, in the order named; "all" (or no name) adds the rest. */
	for (size_t i = 0; i <= sel->n_items; i++) {
		const char *item = i < sel->n_items ? sel->items[i] : NULL;
		bool all = item ? strcmp(item, "all") == 0 : !any_positive;

		if (item && (item[0] == '^' || strcmp(item, "host") == 0))
			continue;
		size_t first = ctx->n_backends;

		for (size_t k = 0; k < n; k++) {
			if (!f[k].path || (all ? listed(sel, f[k].name, true)
					       : strcmp(f[k].name, item ? item : "") != 0))
				continue;
			if (!(be = backend_new(ctx, f[k].name, f[k].path)))
				return DEVCACHE_ENOMEM;
			free(f[k].path);
			f[k].path = NULL; /* taken */
			if ((rc = backend_open(be, &ctx->mod_tun)))
				return rc;
		}
		/* What "all" adds comes in the order of the modules' priorities. */
		if (ctx->n_backends - first > 1)
			qsort(ctx->backends + first, ctx->n_backends - first, sizeof *ctx->backends,
			      priority_cmp);
		if (item && !all && !find_found(f, n, item)) {
			if (!(be = backend_new(ctx, item, "")))
				return DEVCACHE_ENOMEM;
			set_status(be, DEVCACHE_BACKEND_NOT_FOUND, _("no module %s.so in %s"), item,
				   path);
		}
	}
	for (size_t k = 0; k < n; k++) {
		if (!f[k].path)
			continue;
		if (!(be = backend_new(ctx, f[k].name, f[k].path)))
			return DEVCACHE_ENOMEM;
		set_status(be, DEVCACHE_BACKEND_EXCLUDED,
			   listed(sel, f[k].name, true) ? _("excluded by the backends tunable")
							: _("not named in the backends tunable"));
	}
	/* Every module's tunables are known now: give them their values, then
	 * start the modules, which read them. */
	rc = module_tunables_apply(&ctx->mod_tun, &ctx->tun, NULL, NULL);
	if (rc == 0)
		rc = leftover(ctx->backends, ctx->n_backends, &ctx->tun, &ctx->mod_tun, &ctx->log,
			      NULL, NULL);
	for (size_t k = 0; rc == 0 && k < ctx->n_backends; k++)
		rc = backend_run(ctx, ctx->backends[k]);
	return rc;
}

/* A folder of backend_path that is not there is said to be missing, so that
 * a mistyped DEVCACHE_BACKEND_PATH does not read as "no module found": as a
 * warning where someone set the path, in the debug log for the default (a
 * library installed without modules has no folder for them). */
static void report_missing_dirs(devcache_ctx_t *ctx)
{
	const char *origin = tunable_origin(&ctx->tun, TUN_backend_path);
	bool set = tunable_is_set(&ctx->tun, TUN_backend_path);
	char *copy = strdup(ctx->tun_text[TUN_backend_path]), *save = NULL;

	if (!copy)
		return;
	for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		struct stat st;
		int r = stat(dir, &st);

		if (r == 0 && S_ISDIR(st.st_mode))
			continue;
		if (r == 0 || errno == ENOENT || errno == ENOTDIR)
			log_msg(&ctx->log, set ? DEVCACHE_LOG_WARNING : DEVCACHE_LOG_DEBUG,
				_("backend_path (%s): %s: no such directory"), origin, dir);
	}
	free(copy);
}

int backends_load(devcache_ctx_t *ctx)
{
	struct found *f = NULL;
	size_t n = 0;
	struct backend *host = backend_new(ctx, "host", "built-in");
	int rc;

	if (!host)
		return DEVCACHE_ENOMEM;
	if ((rc = backend_start(ctx, host, host_backend_ops())))
		return rc;
	if (host->status != DEVCACHE_BACKEND_LOADED || host->n_devices != 1)
		return err_set(DEVCACHE_EBACKEND, _("the host backend failed: %s"),
			       host->reason ? host->reason : "");
	report_missing_dirs(ctx);
	rc = scan(ctx->tun_text[TUN_backend_path], &f, &n);
	if (rc == 0)
		rc = load_selected(ctx, f, n);
	for (size_t i = 0; i < n; i++)
		free(f[i].name), free(f[i].path);
	free(f);
	return rc;
}

static void free_backend(struct backend *be)
{
	backend_stop(be);
	free(be->name);
	free(be->path);
	free(be->reason);
	free(be);
}

int backends_check_config(struct tunable_set *set, const char *path, struct log_state *log,
			  config_report_fn report, void *user)
{
	/* Records that belong to no context: opened to read what they declare,
	 * never started. */
	devcache_ctx_t scratch = {0};
	struct module_tunables mt = {0};
	struct found *f = NULL;
	size_t n = 0;
	int rc;

	log_init(&scratch.log, log->fn, log->user);
	log_flush(&scratch.log, log->level);
	if (!path)
		path = tun_get(set, backend_path);
	rc = scan(path ? path : "", &f, &n);
	for (size_t i = 0; i < n && rc == 0; i++) {
		struct backend *be = backend_new(&scratch, f[i].name, f[i].path);

		if (!be)
			rc = DEVCACHE_ENOMEM;
		else
			rc = backend_open(be, &mt);
	}
	if (rc == 0) {
		int r1 = module_tunables_apply(&mt, set, report, user);
		int r2 = leftover(scratch.backends, scratch.n_backends, set, &mt, log, report, user);

		rc = r1 ? r1 : r2;
	}
	for (size_t i = 0; i < scratch.n_backends; i++)
		free_backend(scratch.backends[i]);
	free(scratch.backends);
	for (size_t i = 0; i < n; i++)
		free(f[i].name), free(f[i].path);
	free(f);
	module_tunables_free(&mt);
	log_destroy(&scratch.log);
	return rc;
}

void backends_unload(devcache_ctx_t *ctx)
{
	for (size_t i = ctx->n_backends; i-- > 0;) {
		free_backend(ctx->backends[i]);
	}
	free(ctx->backends);
	ctx->backends = NULL;
	ctx->n_backends = 0;
}
