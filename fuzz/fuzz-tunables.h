/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fuzz-tunables.h - what the configuration fuzz targets check of every set of tunables the parser accepts. */
#ifndef DEVCACHE_FUZZ_TUNABLES_H
#define DEVCACHE_FUZZ_TUNABLES_H

#include "internal.h"

/* A log that keeps nothing (the parsers log ignored PyTorch options). */
void fuzz_log_init(struct log_state *log);

/* Every value of set, formatted as devcache config prints it, must parse
 * back to the same text; aborts otherwise. */
void fuzz_check_tunables(const struct tunable_set *set);

#endif
