/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-folder.c - folders: the one model a folder holds, and diffusers pipelines, whose components are folders of their own. */
#include "model-file.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

/* ---- a folder ----------------------------------------------------------------- */

/* The models a folder holds: each index, each GGUF split (once), each
 * safetensors or GGUF file that no index or split claims. */
struct candidates {
	char **names;
	size_t n, cap;
};

static int add_candidate(struct candidates *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->names[i], name) == 0)
			return 0;
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 8;
		char **p = realloc(c->names, cap * sizeof *p);

		if (!p)
			return err_oom();
		c->names = p;
		c->cap = cap;
	}
	if (!(c->names[c->n] = strdup(name)))
		return err_oom();
	c->n++;
	return 0;
}

static void free_candidates(struct candidates *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->names[i]);
	free(c->names);
}

/* The shard file names the folder's indexes claim, each index read once
 * and lightly (only the weight_map's values); an index that does not read
 * claims nothing here, and is reported when it is opened. */
static int claimed_shards(const char *dir, char **entries, size_t n, struct candidates *claimed)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct json_object *root = NULL, *map;
		char *path;

		if (!mf_ends_with(entries[i], ".safetensors.index.json"))
			continue;
		if (!(path = mf_join(dir, entries[i])))
			return err_oom();
		if (mf_read_index(path, &root) == 0 &&
		    json_object_object_get_ex(root, "weight_map", &map) &&
		    json_object_is_type(map, json_type_object)) {
			json_object_object_foreach(map, k, v) {
				(void)k;
				if (rc == 0 && json_object_is_type(v, json_type_string))
					rc = add_candidate(claimed, json_object_get_string(v));
			}
		}
		json_object_put(root);
		free(path);
	}
	if (rc == 0)
		err_clear();
	return rc;
}

static bool is_candidate(const struct candidates *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->names[i], name) == 0)
			return true;
	return false;
}

static int list_dir(const char *dir, char ***entries_p, size_t *n_p)
{
	DIR *d = opendir(dir);
	char **entries = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;

	if (!d)
		return err_set(errno == ENOENT ? DEVCACHE_ENOENT : DEVCACHE_EIO,
			       _("%s: cannot read the folder: %s"), dir, strerror(errno));
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 32;
			char **p = realloc(entries, cap * sizeof *p);
			if (!p)
				break;
			entries = p;
		}
		if (!(entries[n] = strdup(e->d_name)))
			break;
		n++;
	}
	closedir(d);
	if (e) {
		for (size_t i = 0; i < n; i++)
			free(entries[i]);
		free(entries);
		return err_oom();
	}
	if (n > 1) /* an empty folder has no array at all */
		qsort(entries, n, sizeof *entries, mf_by_string);
	*entries_p = entries;
	*n_p = n;
	return 0;
}

static void free_entries(char **entries, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(entries[i]);
	free(entries);
}

static int folder_candidates(const char *dir, struct candidates *c)
{
	struct candidates claimed = {0};
	char **entries = NULL;
	size_t n = 0;
	int rc;

	if ((rc = list_dir(dir, &entries, &n)) || (rc = claimed_shards(dir, entries, n, &claimed))) {
		free_entries(entries, n);
		return rc;
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *name = entries[i];
		size_t prefix;
		unsigned no, count;

		if (mf_ends_with(name, ".safetensors.index.json"))
			rc = add_candidate(c, name);
		else if (mf_ends_with(name, ".safetensors") && !is_candidate(&claimed, name))
			rc = add_candidate(c, name);
		else if (mf_ends_with(name, ".gguf") && mf_split_name(name, &prefix, &no, &count) && count > 1) {
			char first[PATH_MAX];

			snprintf(first, sizeof first, "%.*s-00001-of-%05u.gguf", (int)prefix, name, count);
			rc = add_candidate(c, first);
		} else if (mf_ends_with(name, ".gguf"))
			rc = add_candidate(c, name);
	}
	free_candidates(&claimed);
	free_entries(entries, n);
	return rc;
}

/* ---- cycles -------------------------------------------------------------------- */

/* The folders being opened, innermost first.  A link among a folder's
 * files can lead back to one of them ("unet/a.safetensors -> ..");
 * followed, a pipeline would open itself again inside itself, twice per
 * component and level, until the path is too long.  So a folder met
 * again on the way down is refused, known by its identity (device and
 * inode), which no spelling of its path changes.  Only the outermost call
 * starts a chain: every way down (a pipeline's components, the folders
 * among their files) passes it on. */
struct visit {
	const char *path;
	dev_t dev;
	ino_t ino;
	const struct visit *up;
	bool *cycle; /* the outermost call's: set when a cycle was refused */
};

/* A cycle when st is one of the folders from up outwards. */
static int refuse_cycle(const char *path, const struct stat *st, const struct visit *up)
{
	for (const struct visit *v = up; v; v = v->up)
		if (v->dev == st->st_dev && v->ino == st->st_ino) {
			*v->cycle = true;
			return err_set(DEVCACHE_EFORMAT,
				       _("%s: leads back to %s, a folder that holds it: a cycle"),
				       path, v->path);
		}
	return 0;
}

/* Step into the folder dir (here, on the stack) from up, or start a
 * chain (up NULL; cycle the flag it reports to).  A folder that cannot be
 * stat()ed is reported by whatever reads it next. */
static int enter(const char *dir, const struct visit *up, bool *cycle, struct visit *here)
{
	struct stat st;

	*here = (struct visit){.path = dir, .up = up, .cycle = up ? up->cycle : cycle};
	if (stat(dir, &st) != 0)
		return 0;
	here->dev = st.st_dev;
	here->ino = st.st_ino;
	return refuse_cycle(dir, &st, up);
}

/* ---- the one model of a folder ------------------------------------------------ */

static int pipeline_open_in(const char *dir, const struct visit *up, devcache_pipeline_t **pl_p);

static bool is_pipeline(const char *dir)
{
	char *p = mf_join(dir, "model_index.json");
	bool yes = p && access(p, F_OK) == 0;

	free(p);
	return yes;
}

static int pipeline_refusal(const char *dir, const struct visit *up)
{
	devcache_pipeline_t *pl;
	char list[1024] = "";
	size_t len = 0;
	int rc;

	/* Inside a pipeline's component, a pipeline is not a weight file of
	 * the component's, and is not opened: listing pipelines inside
	 * pipelines would cost as much as a cycle. */
	if (up)
		return err_set(DEVCACHE_EINVAL, _("%s: a diffusers pipeline inside a pipeline"),
			       dir);
	if ((rc = pipeline_open_in(dir, up, &pl)))
		return rc;
	for (size_t i = 0; i < pl->n; i++)
		if (pl->comps[i].shards && len < sizeof list)
			len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "",
						pl->comps[i].name);
	devcache_pipeline_close(pl);
	return err_set(DEVCACHE_EINVAL,
		       _("%s: a diffusers pipeline, not one model: load one of: %s"), dir,
		       len ? list : _("(no component has weights)"));
}

/* The one model the folder dir holds, as the path of a file to open
 * (never a folder: a folder there would be resolved again, outside the
 * chain that up carries). */
static int resolve_in(const char *dir, const struct visit *up, char **path_p)
{
	struct candidates c = {0};
	struct visit here;
	struct stat st;
	bool cycle = false;
	int rc;

	*path_p = NULL;
	if ((rc = enter(dir, up, &cycle, &here)))
		return rc;
	if (is_pipeline(dir))
		return pipeline_refusal(dir, up);
	if ((rc = folder_candidates(dir, &c)))
		goto out;
	if (c.n == 0) {
		rc = err_set(DEVCACHE_ENOENT, _("%s: the folder holds no safetensors or GGUF model"),
			     dir);
	} else if (c.n > 1) {
		char list[1024] = "";
		size_t len = 0;

		for (size_t i = 0; i < c.n && len < sizeof list; i++)
			len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
						c.names[i]);
		rc = err_set(DEVCACHE_EINVAL, _("%s: the folder holds %zu models (%s): name one"), dir,
			     c.n, list);
	} else if (!(*path_p = mf_join(dir, c.names[0]))) {
		rc = err_oom();
	} else if (stat(*path_p, &st) == 0 && S_ISDIR(st.st_mode)) {
		if (!(rc = refuse_cycle(*path_p, &st, &here)))
			rc = err_set(DEVCACHE_EINVAL, _("%s: not a regular file"), *path_p);
		free(*path_p);
		*path_p = NULL;
	}
out:
	free_candidates(&c);
	return rc;
}

int mf_resolve_folder(const char *dir, char **path_p)
{
	return resolve_in(dir, NULL, path_p);
}

/* ---- diffusers pipelines --------------------------------------------------------- */

/* A weight file of a component (or the one model of a folder there). */
static int open_weights(const char *path, const struct visit *up, devcache_model_file_t **mf_p)
{
	char *resolved = NULL;
	struct stat st;
	int rc;

	/* A folder is resolved here, on the chain, so that
	 * devcache_model_file_open() is given the file it holds. */
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		if ((rc = resolve_in(path, up, &resolved)))
			return rc;
		path = resolved;
	}
	rc = devcache_model_file_open(path, mf_p);
	free(resolved);
	return rc;
}

static int component_weights(devcache_component_t *comp, const struct visit *up)
{
	struct candidates c = {0};
	struct visit here;
	struct stat st;
	int rc;

	if (stat(comp->path, &st) != 0 || !S_ISDIR(st.st_mode))
		return 0; /* a component without a folder has no weights here */
	if ((rc = enter(comp->path, up, NULL, &here)))
		return rc;
	rc = folder_candidates(comp->path, &c);
	/* One model: its files; several (variants): all of them. */
	for (size_t i = 0; rc == 0 && i < c.n; i++) {
		char *path = mf_join(comp->path, c.names[i]);
		devcache_model_file_t *mf;
		int r;

		if (!path) {
			rc = err_oom();
			break;
		}
		if ((r = open_weights(path, &here, &mf)) == 0) {
			comp->size += mf->size;
			comp->shards += mf->n_parts ? mf->n_parts : 1;
			devcache_model_file_close(mf);
		} else if (*here.cycle) {
			rc = r; /* unlike a variant that does not open, a cycle is the pipeline's fault */
		}
		free(path);
	}
	free_candidates(&c);
	if (rc == 0)
		err_clear(); /* a variant that does not open is not the listing's fault */
	return rc;
}

static int add_component(devcache_pipeline_t *pl, const char *dir, const char *name,
			 struct json_object *v, const struct visit *up)
{
	devcache_component_t *comp = &pl->comps[pl->n];
	struct json_object *lib = json_object_array_get_idx(v, 0), *cls = json_object_array_get_idx(v, 1);

	memset(comp, 0, sizeof *comp);
	comp->name = strdup(name);
	comp->path = mf_join(dir, name);
	comp->library = strdup(json_object_is_type(lib, json_type_string) ? json_object_get_string(lib) : "");
	comp->class_name = strdup(json_object_is_type(cls, json_type_string) ? json_object_get_string(cls) : "");
	pl->n++;
	if (!comp->name || !comp->path || !comp->library || !comp->class_name)
		return err_oom();
	return component_weights(comp, up);
}

static int pipeline_open_in(const char *dir, const struct visit *up, devcache_pipeline_t **pl_p)
{
	struct json_object *root = NULL;
	devcache_pipeline_t *pl = NULL;
	char *index = NULL;
	struct visit here;
	bool cycle = false;
	int rc;

	*pl_p = NULL;
	if ((rc = enter(dir, up, &cycle, &here)))
		return rc;
	if (!(index = mf_join(dir, "model_index.json")))
		return mf_name_oom(dir, err_oom());
	if ((rc = mf_read_index(index, &root))) {
		if (rc == DEVCACHE_EFORMAT)
			rc = err_set(DEVCACHE_EFORMAT, _("%s: not a diffusers model_index.json"), index);
		goto out;
	}
	size_t cap = (size_t)json_object_object_length(root);
	if (!(pl = calloc(1, sizeof *pl)) || !(pl->comps = calloc(cap ? cap : 1, sizeof *pl->comps))) {
		rc = err_oom();
		goto out;
	}
	/* Keys starting with "_" are the pipeline's own (_class_name,
	 * _diffusers_version); components are [library, class] pairs. */
	json_object_object_foreach(root, key, v) {
		if (key[0] == '_' || !json_object_is_type(v, json_type_array) ||
		    json_object_array_length(v) != 2)
			continue;
		/* A component is a folder of the pipeline's, never a path out of it. */
		if (!key[0] || strchr(key, '/') || strcmp(key, "..") == 0 || strcmp(key, ".") == 0) {
			rc = err_set(DEVCACHE_EFORMAT,
				     _("%s: component '%s' is not the name of a folder in the "
				       "pipeline's"),
				     index, key);
			goto out;
		}
		if ((rc = add_component(pl, dir, key, v, &here)))
			goto out;
	}
	*pl_p = pl;
	pl = NULL;
out:
	devcache_pipeline_close(pl);
	json_object_put(root);
	free(index);
	return mf_name_oom(dir, rc);
}

int devcache_pipeline_open(const char *dir, devcache_pipeline_t **pl_p)
{
	if (!dir || !pl_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_pipeline_open: NULL argument"));
	return pipeline_open_in(dir, NULL, pl_p);
}

void devcache_pipeline_close(devcache_pipeline_t *pl)
{
	if (!pl)
		return;
	for (size_t i = 0; i < pl->n; i++) {
		free((char *)pl->comps[i].name);
		free((char *)pl->comps[i].path);
		free((char *)pl->comps[i].library);
		free((char *)pl->comps[i].class_name);
	}
	free(pl->comps);
	free(pl);
}

size_t devcache_pipeline_component_count(const devcache_pipeline_t *pl)
{
	return pl ? pl->n : 0;
}

int devcache_pipeline_component(const devcache_pipeline_t *pl, size_t index,
				devcache_component_t *comp)
{
	if (!pl || !comp)
		return err_set(DEVCACHE_EINVAL, _("devcache_pipeline_component: NULL argument"));
	if (index >= pl->n)
		return err_set(DEVCACHE_ENOENT, _("no component %zu (the pipeline has %zu)"), index,
			       pl->n);
	*comp = pl->comps[index];
	return 0;
}
