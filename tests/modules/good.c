/* good.c - a well-formed test backend with two devices. */
#define FAKE_NAME "good"
#include "fake.h"
