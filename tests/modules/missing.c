/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* missing.c - a test backend without the mandatory mem_alloc entry. */
#define FAKE_NAME "missing"
#define FAKE_MEM_ALLOC NULL
#include "fake.h"
