/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* badabi.c - a test backend built for another ABI version. */
#define FAKE_NAME "badabi"
#define FAKE_ABI 999
#include "fake.h"
