/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* newminor.c - a test backend built for a later minor version of the module ABI, which loads. */
#define FAKE_NAME "newminor"
#define FAKE_MINOR (DEVCACHE_BACKEND_ABI_MINOR + 7)
#define FAKE_DEVICES 1
#define FAKE_DLPACK 7 /* kDLVulkan */
#include "fake.h"
