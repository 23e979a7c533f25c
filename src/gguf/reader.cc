// Placeholder: filled in by the gguf module work.
#include "mnemo/gguf.h"
