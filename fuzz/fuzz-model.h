/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fuzz-model.h - what the model fuzz targets check of every model file the reader accepts. */
#ifndef DEVCACHE_FUZZ_MODEL_H
#define DEVCACHE_FUZZ_MODEL_H

#include <devcache.h>

/* Read every accessor of mf and abort when what the reader accepted breaks
 * a promise of devcache.h: a tensor outside its file, a name that find
 * does not find, metadata that is not JSON. */
void fuzz_check_model_file(const devcache_model_file_t *mf);

#endif
