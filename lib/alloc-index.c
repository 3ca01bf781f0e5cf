/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-index.c - the free-block index: a red-black tree of free blocks by size, then address, for PyTorch's best fit. */
#include "alloc.h"

#define before index_before

/* Put v where u is under u's parent. */
static void replace_child(struct free_index *ix, struct block *u, struct block *v)
{
	if (!u->tp)
		ix->root = v;
	else if (u == u->tp->tl)
		u->tp->tl = v;
	else
		u->tp->tr = v;
	if (v)
		v->tp = u->tp;
}

/* Rotations: x's child on the other side takes x's place, x becomes its
 * child on this side. */
static void rotate_left(struct free_index *ix, struct block *x)
{
	struct block *y = x->tr;

	x->tr = y->tl;
	if (y->tl)
		y->tl->tp = x;
	replace_child(ix, x, y);
	y->tl = x;
	x->tp = y;
}

static void rotate_right(struct free_index *ix, struct block *x)
{
	struct block *y = x->tl;

	x->tl = y->tr;
	if (y->tr)
		y->tr->tp = x;
	replace_child(ix, x, y);
	y->tr = x;
	x->tp = y;
}

static bool is_red(const struct block *b)
{
	return b && b->red;
}

void index_insert(struct free_index *ix, struct block *b)
{
	index_moved(ix);
	struct block *p = NULL, **link = &ix->root;

	b->is_free = true;
	ix->count++;
	while (*link) {
		p = *link;
		link = before(b, p) ? &p->tl : &p->tr;
	}
	b->tp = p;
	b->tl = b->tr = NULL;
	b->red = true;
	*link = b;
	/* A red node under a red parent: recolour while the uncle is red,
	 * else one or two rotations end it. */
	while ((p = b->tp) && p->red) {
		struct block *g = p->tp, *u;

		if (p == g->tl) {
			u = g->tr;
			if (is_red(u)) {
				p->red = u->red = false;
				g->red = true;
				b = g;
				continue;
			}
			if (b == p->tr) {
				rotate_left(ix, p);
				b = p;
				p = b->tp;
			}
			p->red = false;
			g->red = true;
			rotate_right(ix, g);
		} else {
			u = g->tl;
			if (is_red(u)) {
				p->red = u->red = false;
				g->red = true;
				b = g;
				continue;
			}
			if (b == p->tl) {
				rotate_right(ix, p);
				b = p;
				p = b->tp;
			}
			p->red = false;
			g->red = true;
			rotate_left(ix, g);
		}
	}
	ix->root->red = false;
}

static struct block *leftmost(struct block *b)
{
	while (b->tl)
		b = b->tl;
	return b;
}

/* Restore the black height after a black node left the tree above x
 * (which may be empty: xp is its parent). */
static void remove_fixup(struct free_index *ix, struct block *x, struct block *xp)
{
	while (x != ix->root && !is_red(x)) {
		struct block *w;

		if (x == xp->tl) {
			w = xp->tr;
			if (w->red) {
				w->red = false;
				xp->red = true;
				rotate_left(ix, xp);
				w = xp->tr;
			}
			if (!is_red(w->tl) && !is_red(w->tr)) {
				w->red = true;
				x = xp;
				xp = x->tp;
				continue;
			}
			if (!is_red(w->tr)) {
				w->tl->red = false;
				w->red = true;
				rotate_right(ix, w);
				w = xp->tr;
			}
			w->red = xp->red;
			xp->red = false;
			w->tr->red = false;
			rotate_left(ix, xp);
		} else {
			w = xp->tl;
			if (w->red) {
				w->red = false;
				xp->red = true;
				rotate_right(ix, xp);
				w = xp->tl;
			}
			if (!is_red(w->tl) && !is_red(w->tr)) {
				w->red = true;
				x = xp;
				xp = x->tp;
				continue;
			}
			if (!is_red(w->tl)) {
				w->tr->red = false;
				w->red = true;
				rotate_left(ix, w);
				w = xp->tl;
			}
			w->red = xp->red;
			xp->red = false;
			w->tl->red = false;
			rotate_right(ix, xp);
		}
		x = ix->root;
	}
	if (x)
		x->red = false;
}

void index_remove(struct free_index *ix, struct block *b)
{
	index_moved(ix);
	struct block *x, *xp;
	bool removed_red = b->red;

	ix->count--;
	b->is_free = false;
	if (!b->tl || !b->tr) {
		x = b->tl ? b->tl : b->tr;
		xp = b->tp;
		replace_child(ix, b, x);
	} else {
		/* Two children: b's successor takes its place and colour. */
		struct block *y = leftmost(b->tr);

		removed_red = y->red;
		x = y->tr;
		if (y->tp == b) {
			xp = y;
		} else {
			xp = y->tp;
			replace_child(ix, y, y->tr);
			y->tr = b->tr;
			y->tr->tp = y;
		}
		replace_child(ix, b, y);
		y->tl = b->tl;
		y->tl->tp = y;
		y->red = b->red;
	}
	if (!removed_red)
		remove_fixup(ix, x, xp);
	b->tl = b->tr = b->tp = NULL;
}

struct block *index_last(const struct free_index *ix)
{
	struct block *b = ix->root;

	while (b && b->tr)
		b = b->tr;
	return b;
}

/* The size of the largest free block, for the fragmentation figure. */
size_t index_largest(const struct free_index *ix)
{
	const struct block *b = index_last(ix);

	return b ? b->size : 0;
}

void index_move(struct free_index *ix, struct block *b)
{
	index_remove(ix, b);
	index_insert(ix, b);
}
