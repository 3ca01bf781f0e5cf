/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* model-open.c - opening a model: one file, its format told by its first bytes, and devcache_model_file_open() for a file, a set or a folder. */
#include "model-file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

/*
 * mf_open_file() opens and parses one file; the set's files build on it:
 * model-set.c Hugging Face indexes, model-split.c GGUF splits,
 * model-folder.c the one model a folder holds.  devcache_model_file_open()
 * picks among them by what the path names.
 */

int mf_open_file(const char *path, struct devcache_model_file **mf_p)
{
	struct devcache_model_file *mf;
	unsigned char magic[9];
	struct stat st;
	int rc;

	*mf_p = NULL;
	if (!(mf = calloc(1, sizeof *mf)) || !(mf->path = strdup(path))) {
		free(mf);
		return err_oom();
	}
	/* O_NONBLOCK: opening a FIFO would otherwise wait for a writer before
	 * the check below could refuse it.  It changes nothing for a regular
	 * file's reads. */
	mf->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (mf->fd < 0 || fstat(mf->fd, &st) != 0) {
		int e = errno;

		devcache_model_file_close(mf);
		rc = err_set(e == ENOENT ? DEVCACHE_ENOENT : DEVCACHE_EIO, _("%s: cannot open: %s"),
			     path, strerror(e));
		errno = e; /* for a set's message: EMFILE */
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		devcache_model_file_close(mf);
		return err_set(DEVCACHE_EINVAL, _("%s: not a regular file"), path);
	}
	mf->size = (uint64_t)st.st_size;
	mf->dev = st.st_dev;
	mf->ino = st.st_ino;
	mf->mtime = st.st_mtim;
	mf->alignment = 1;
	/* GGUF starts with its magic; safetensors with an 8-byte length and
	 * then the JSON header's opening brace. */
	size_t have = mf->size < sizeof magic ? (size_t)mf->size : sizeof magic;
	if ((rc = mf_read(mf, magic, have, 0, _("the magic number")))) {
		devcache_model_file_close(mf);
		return rc;
	}
	if (have >= 4 && memcmp(magic, "GGUF", 4) == 0) {
		mf->format = DEVCACHE_FORMAT_GGUF;
		rc = gguf_parse(mf);
	} else if (have == 9 && magic[8] == '{') {
		mf->format = DEVCACHE_FORMAT_SAFETENSORS;
		rc = safetensors_parse(mf);
	} else {
		rc = mf_error(mf, _("neither a safetensors nor a GGUF file"));
	}
	if (rc == 0)
		rc = mf_index_tensors(mf);
	if (rc) {
		devcache_model_file_close(mf);
		return rc;
	}
	*mf_p = mf;
	return 0;
}

int devcache_model_file_open(const char *path, devcache_model_file_t **mf_p)
{
	struct devcache_model_file *mf;
	const char *given = path;
	char *resolved = NULL;
	struct stat st;
	int rc;

	if (!path || !mf_p)
		return err_set(DEVCACHE_EINVAL, _("devcache_model_file_open: NULL argument"));
	*mf_p = NULL;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		if ((rc = mf_resolve_folder(path, &resolved)))
			return mf_name_oom(given, rc);
		path = resolved;
	}
	if (mf_ends_with(path, ".json"))
		rc = mf_open_index(path, mf_p);
	else if ((rc = mf_open_file(path, &mf)) == 0)
		rc = mf_maybe_split(mf, mf_p);
	if (rc == 0 && (rc = mf_index_meta(*mf_p))) {
		devcache_model_file_close(*mf_p);
		*mf_p = NULL;
	}
	free(resolved);
	return mf_name_oom(given, rc);
}
