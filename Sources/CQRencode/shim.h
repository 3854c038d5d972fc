#ifndef ROLLOUT_CQRENCODE_SHIM_H
#define ROLLOUT_CQRENCODE_SHIM_H
#include <qrencode.h>
#endif
