/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* good.c - a well-formed test backend with two devices. */
#define FAKE_NAME "good"
#include "fake.h"
