/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* soak-models.c - bench/soak's models: safetensors, GGUF and a sharded set of different sizes, written with known bytes. */
#include "soak.h"

#include "model-writer-core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum format { SAFETENSORS, GGUF, SHARDED };

/* The models, the same on every run: the seed of the soak drives the
 * threads, not the files.  huge.gguf is larger than the soak's VRAM
 * budget: only partial_loading places it on a device. */
static const struct spec {
	const char *label;
	enum format format;
	unsigned tensors, shards;
	size_t min, max; /* tensor sizes, bytes */
} specs[] = {
	{"small.safetensors", SAFETENSORS, 7, 1, 1, 512 << 10},
	{"medium.gguf", GGUF, 10, 1, 100 << 10, 800 << 10},
	{"set.safetensors.index.json", SHARDED, 12, 3, 300 << 10, 900 << 10},
	{"large.safetensors", SAFETENSORS, 8, 1, 1 << 20, 2 << 20},
	{"huge.gguf", GGUF, 16, 1, 1536 << 10, 2560 << 10},
};

/* ---- files ----------------------------------------------------------------------- */

/* dir/name into path, listed for removal before it is written (so that a
 * file left half-written goes too); -1 after saying why. */
static int listed(struct soak_models *ms, const char *name, char *path, size_t size)
{
	if ((size_t)snprintf(path, size, "%s/%s", ms->dir, name) >= size ||
	    ms->n_files == SOAK_MAX_FILES) {
		fprintf(stderr, "soak: %s/%s: name too long or too many files\n", ms->dir, name);
		return -1;
	}
	if (!(ms->files[ms->n_files] = strdup(path))) {
		fprintf(stderr, "soak: out of memory\n");
		return -1;
	}
	ms->n_files++;
	return 0;
}

/* The bytes of the soak's tensors: soak_byte() of their names' hashes. */
static void fill(void *user, size_t i, uint64_t off, unsigned char *buf, size_t n)
{
	const struct soak_tensor *t = user;

	for (size_t j = 0; j < n; j++)
		buf[j] = soak_byte(t[i].hash, (size_t)off + j);
}

/* The model's tensors for the model writer, tensor i in shard
 * i * shards / n; NULL after saying why. */
static struct mw_tensor *writer_tensors(const struct soak_model *m, unsigned shards)
{
	struct mw_tensor *t = calloc(m->n, sizeof *t);

	if (!t) {
		fprintf(stderr, "soak: out of memory\n");
		return NULL;
	}
	for (size_t i = 0; i < m->n; i++)
		t[i] = (struct mw_tensor){.name = m->t[i].name, .size = m->t[i].size,
					  .shard = (unsigned)(i * shards / m->n)};
	return t;
}

/* One safetensors file, one GGUF file (general.architecture "soak", I8
 * tensors), or Hugging Face shards set-0000K-of-0000N.safetensors and
 * their index; each safetensors file with __metadata__ {"format":"pt"}. */
static int write_model(struct soak_models *ms, const struct spec *sp, struct soak_model *m)
{
	static const struct mw_kv arch = {"general.architecture", MW_STRING, 0, "soak"};
	const struct mw_opts o = {.fill = fill, .fill_user = m->t,
				  .metadata_json = "{\"format\":\"pt\"}"};
	struct mw_tensor *t = writer_tensors(m, sp->format == SHARDED ? sp->shards : 1);
	struct mw_err err = {.msg = ""};
	char name[64], path[PATH_MAX];
	int rc = 0;

	if (!t)
		return -1;
	if (listed(ms, sp->label, m->path, sizeof m->path))
		rc = -1;
	for (unsigned k = 0; rc == 0 && sp->format == SHARDED && k < sp->shards; k++)
		if (mw_shard_name_e(name, sizeof name, "set", k, sp->shards, "safetensors", &err) ||
		    listed(ms, name, path, sizeof path))
			rc = -1;
	if (rc == 0)
		rc = sp->format == SHARDED ? mw_sharded_e(ms->dir, "set", t, m->n, sp->shards, &o, 0,
							  NULL, 0, &err)
		     : sp->format == GGUF ? mw_gguf_write(m->path, &arch, 1, t, m->n, MW_ALL_SHARDS,
							  &o, &err)
					  : mw_st_write(m->path, t, m->n, MW_ALL_SHARDS, &o, &err);
	if (rc && err.msg[0])
		fprintf(stderr, "soak: %s\n", err.msg);
	free(t);
	return rc;
}

/* ---- the models ------------------------------------------------------------------ */

static uint32_t fnv1a(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

/* Sizes from a fixed generator; the first tensors of small.safetensors are
 * 1 and 255 bytes, so that odd sizes and the 256-byte packing are used. */
static void make_tensors(size_t k, const struct spec *sp, struct soak_model *m, uint64_t *seed)
{
	for (size_t i = 0; i < m->n; i++) {
		struct soak_tensor *t = &m->t[i];

		*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
		snprintf(t->name, sizeof t->name, "m%u.layer%u.weight", (unsigned)k % 100, (unsigned)i % 100);
		t->size = sp->min + (size_t)(*seed >> 33) % (sp->max - sp->min + 1);
		if (sp->min == 1 && i < 2)
			t->size = i ? 255 : 1;
		t->hash = fnv1a(t->name);
		m->bytes += t->size;
	}
}

int soak_models_write(struct soak_models *ms, const char *parent)
{
	uint64_t seed = 20261126;

	memset(ms, 0, sizeof *ms);
	if ((size_t)snprintf(ms->dir, sizeof ms->dir, "%s/devcache-soak-XXXXXX", parent) >=
		    sizeof ms->dir ||
	    !mkdtemp(ms->dir)) {
		fprintf(stderr, "soak: cannot make a directory in %s: %s\n", parent, strerror(errno));
		ms->dir[0] = 0;
		return -1;
	}
	for (size_t k = 0; k < sizeof specs / sizeof *specs; k++) {
		const struct spec *sp = &specs[k];
		struct soak_model *m = &ms->m[ms->n++];

		m->label = sp->label;
		m->n = sp->tensors;
		if (!(m->t = calloc(m->n, sizeof *m->t))) {
			fprintf(stderr, "soak: out of memory\n");
			return -1;
		}
		make_tensors(k, sp, m, &seed);
		if (write_model(ms, sp, m))
			return -1;
	}
	return 0;
}

void soak_models_remove(struct soak_models *ms)
{
	for (size_t i = 0; i < ms->n_files; i++) {
		unlink(ms->files[i]);
		free(ms->files[i]);
	}
	for (size_t k = 0; k < ms->n; k++)
		free(ms->m[k].t);
	if (ms->dir[0])
		rmdir(ms->dir);
	memset(ms, 0, sizeof *ms);
}
