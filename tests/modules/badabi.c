/* badabi.c - a test backend built for another ABI version. */
#define FAKE_NAME "badabi"
#define FAKE_ABI 999
#include "fake.h"
