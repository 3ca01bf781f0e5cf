/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* misnamed.c - a test backend whose ops name differs from its file name. */
#define FAKE_NAME "other"
#include "fake.h"
