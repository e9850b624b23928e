/* backends.h: every backend tg has, by name (backends.c).
 *
 * The one place that lists the backends, as QBE's driver lists its
 * targets: the training loop and tgrun open a device by name here and then
 * use only backend.h.  No other file outside a backend's own folder names
 * anything of a backend (tests/arch/check_architecture.py checks it). */
#ifndef TG_BACKENDS_H
#define TG_BACKENDS_H

#include "backend.h"

/* The backend called name ("ref", "cpu"), or NULL. */
const tg_backend *tg_backend_find(const char *name);
/* All of them, in the order --help lists them; *n gets the count. */
const tg_backend *const *tg_backends(int *n);
const char *tg_backend_name(const tg_backend *x);
const char *tg_backend_summary(const tg_backend *x);
/* The precision policy runs on x get unless they ask for one: "bf16" on
 * the cuda backends, "f32" on the CPU (passes.h: tg_precision_parse). */
const char *tg_backend_default_precision(const tg_backend *x);
/* "ref, cpu": the names, for messages. */
const char *tg_backend_names_text(void);
/* The name nearest to a misspelt one ("cdu" -> "cpu"), or NULL. */
const char *tg_backend_suggest(const char *name);

/* Opens the backend called name; an unknown name is an error through ctx
 * naming the known ones (and the nearest, if it looks like a typo). */
tg_device *tg_device_open_named(tg_ctx *ctx, const char *name, const tg_device_opts *o);

#endif
