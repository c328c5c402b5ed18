/* runtime/families/hooks.h — what each family computes at the forward pass's named points (runtime/forward.h's
 * gm_forward_hooks), looked up from the family's row. The row (model/family.h) says what a model is; its forward
 * steps live here, above model/, because they run on the backend's ops (runtime/backend.h). */
#ifndef GM_RUNTIME_FAMILIES_HOOKS_H
#define GM_RUNTIME_FAMILIES_HOOKS_H

#include "model/family.h"
#include "runtime/forward.h"

/* The hooks of family f; NULL when it adds nothing to the plain Gemma block (or f is NULL). */
const gm_forward_hooks *gm_forward_hooks_of(const gm_family *f);

/* Each family's table (runtime/families/<family>.c). */
extern const gm_forward_hooks gm_3n_forward_hooks;
extern const gm_forward_hooks gm_4_forward_hooks;

#endif
