/* core/version.c — the library's version, for callers to compare with the header they compiled against. */
#include "gemma.h"

const char *gm_version(void) { return GEMMA_VERSION_STRING; }
