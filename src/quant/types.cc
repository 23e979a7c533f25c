// Placeholder: filled in by the quant module work.
#include "mnemo/quant.h"
