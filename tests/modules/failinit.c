/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* failinit.c - a test backend whose init fails the way a driver would. */
#define FAKE_NAME "failinit"
#define FAKE_INIT_FAILS "simulated driver failure: CUDA_ERROR_NO_DEVICE"
#include "fake.h"
