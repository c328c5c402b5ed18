/* runtime/families/hooks.c — the families' forward hooks by row: one line per family that adds to the Gemma block.
 * Keyed by the row's arch name, the one name model/families/registry.c gives each row. */
#include "runtime/families/hooks.h"

#include <string.h>

static const struct {
    const char *arch;
    const gm_forward_hooks *hooks;
} table[] = {
    {"gemma3n", &gm_3n_forward_hooks},
    {"gemma4", &gm_4_forward_hooks},
};

const gm_forward_hooks *gm_forward_hooks_of(const gm_family *f) {
    if (!f) return NULL;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(f->arch, table[i].arch)) return table[i].hooks;
    return NULL;
}
