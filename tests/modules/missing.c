/* missing.c - a test backend without the mandatory mem_alloc entry. */
#define FAKE_NAME "missing"
#define FAKE_MEM_ALLOC NULL
#include "fake.h"
