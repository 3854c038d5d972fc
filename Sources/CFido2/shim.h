#ifndef ROLLOUT_CFIDO2_SHIM_H
#define ROLLOUT_CFIDO2_SHIM_H
// libfido2 (Debian: libfido2-dev): FIDO2/CTAP2 security keys over USB HID, or a transport of the caller's own.
#include <fido.h>
#endif
