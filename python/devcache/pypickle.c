/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pypickle.c - a linear walk over a pickle's opcodes that bounds what unpickling it can cost.
 *
 * devcache.trace_from_torch reads PyTorch memory snapshots, which are
 * pickles, with an unpickler that refuses every class and function.  What
 * it cannot refuse is the price of the plain opcodes: CPython's unpickler
 * sizes its memo from the largest index a PUT names, and zero-fills it, so
 * a 10-byte file saying LONG_BINPUT 2**30 costs 16 GiB and a minute; and a
 * FRAME or a length-prefixed string may claim more bytes than the file
 * has.  This walk runs first, at the speed of memory (pickletools.genops
 * would do the same at a few microseconds an opcode, longer than the load
 * itself for a snapshot of millions of opcodes), and refuses those.  It
 * checks nothing else: a pickle it lets pass is for the unpickler to read
 * or refuse.  The opcodes and their arguments are those of the pickle
 * format, protocols 0 to 5, as Lib/pickletools.py documents them.
 */
#include "pydevcache.h"

#include <stdint.h>
#include <string.h>

enum arg {
	A_NONE,  /* no argument */
	A_FIX,   /* n bytes */
	A_LEN,   /* an n-byte little-endian length, then that many bytes */
	A_LINE,  /* text up to a newline */
	A_LINE2, /* two such lines (GLOBAL, INST) */
};

struct opcode {
	enum arg arg;
	unsigned char n;
};

/* Indexed by opcode byte; arg A_NONE with n 1 marks an opcode with no
 * argument, n 0 a byte that is no opcode. */
static const struct opcode *opcode(unsigned char c)
{
	static const struct opcode none = {A_NONE, 1}, fix1 = {A_FIX, 1}, fix2 = {A_FIX, 2},
				   fix4 = {A_FIX, 4}, fix8 = {A_FIX, 8}, len1 = {A_LEN, 1},
				   len4 = {A_LEN, 4}, len8 = {A_LEN, 8}, line = {A_LINE, 1},
				   line2 = {A_LINE2, 1};

	switch (c) {
	case 'I': case 'L': case 'S': case 'V': case 'F': case 'g': case 'p': case 'P':
		return &line;
	case 'c': case 'i':
		return &line2;
	case 'J': case 'j': case 'r': case 0x84:
		return &fix4;
	case 'K': case 'h': case 'q': case 0x80: case 0x82:
		return &fix1;
	case 'M': case 0x83:
		return &fix2;
	case 'G': case 0x95:
		return &fix8;
	case 0x8a: case 'U': case 'C': case 0x8c:
		return &len1;
	case 0x8b: case 'T': case 'B': case 'X':
		return &len4;
	case 0x8e: case 0x8d: case 0x96:
		return &len8;
	case 'N': case 0x88: case 0x89: case 0x97: case 0x98: case ']': case 'a': case 'e':
	case 'l': case ')': case 't': case 0x85: case 0x86: case 0x87: case '}': case 'd':
	case 's': case 'u': case 0x8f: case 0x90: case 0x91: case '0': case '2': case '(':
	case '1': case 0x94: case 0x93: case 'R': case 'b': case 'o': case 0x81: case 0x92:
	case '.': case 'Q':
		return &none;
	default:
		return NULL;
	}
}

static uint64_t little_endian(const unsigned char *p, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = n; i-- > 0;)
		v = v << 8 | p[i];
	return v;
}

/* _check_pickle(data) -> None, or (kind, message): kind "cut" for a pickle
 * cut short, "damaged" for one that would cost more than its size. */
PyObject *pdc_check_pickle(PyObject *self, PyObject *arg)
{
	Py_buffer view;
	(void)self;

	if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
		return NULL;
	const unsigned char *p = view.buf;
	size_t size = (size_t)view.len, at = 0, ops = 0;
	const char *kind = NULL;
	char why[160] = "";

	while (at < size) {
		size_t start = at;
		unsigned char c = p[at++];
		const struct opcode *op = opcode(c);
		uint64_t n = 0;

		ops++;
		if (!op)
			break; /* not an opcode: the unpickler says so */
		if (c == '.')
			break; /* STOP: the rest is not read */
		switch (op->arg) {
		case A_NONE:
			break;
		case A_FIX:
		case A_LEN:
			if (size - at < op->n) {
				kind = "cut";
				break;
			}
			n = little_endian(p + at, op->n);
			at += op->n;
			if (op->arg == A_LEN || c == 0x95) { /* FRAME: a length too */
				if (n > size - at) {
					kind = "cut";
					snprintf(why, sizeof why,
						 "byte %zu: %llu bytes announced, %zu left in the file",
						 start, (unsigned long long)n, size - at);
					break;
				}
				if (op->arg == A_LEN)
					at += n;
			}
			break;
		case A_LINE:
		case A_LINE2:
			for (int lines = op->arg == A_LINE ? 1 : 2; lines > 0 && !kind; lines--) {
				const unsigned char *nl = memchr(p + at, '\n', size - at);

				if (!nl)
					kind = "cut";
				else if (c == 'p') {
					/* PUT: a decimal memo index */
					n = 0;
					for (const unsigned char *d = p + at; d < nl && n <= size; d++)
						n = *d >= '0' && *d <= '9' ? n * 10 + (uint64_t)(*d - '0')
									   : n;
				}
				if (nl)
					at = (size_t)(nl - p) + 1;
			}
			break;
		}
		if (kind)
			break;
		/* PUT, BINPUT, LONG_BINPUT: the unpickler's memo grows to twice the
		 * index.  A pickler numbers its memo entries from 0, one per object,
		 * and an object takes an opcode at least: no valid index reaches
		 * the number of opcodes before it. */
		if ((c == 'p' || c == 'q' || c == 'r') && n >= ops) {
			kind = "damaged";
			snprintf(why, sizeof why,
				 "byte %zu: memo index %llu, where a pickle of this size has at most %zu",
				 start, (unsigned long long)n, ops);
			break;
		}
	}
	PyBuffer_Release(&view);
	if (!kind)
		Py_RETURN_NONE;
	if (!why[0])
		snprintf(why, sizeof why, "the file ends at byte %zu", size);
	return Py_BuildValue("(ss)", kind, why);
}
