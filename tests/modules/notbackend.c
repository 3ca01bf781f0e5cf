/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* notbackend.c - a shared object in the module directory that is not a backend. */
int notbackend_answer(void);

int notbackend_answer(void)
{
	return 42;
}
