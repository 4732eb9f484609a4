// The system libnghttp2 (Debian: libnghttp2-dev), as Herald's HTTP/2 engine sees it.
#ifndef HERALD_CNGHTTP2_SHIM_H
#define HERALD_CNGHTTP2_SHIM_H

#include <nghttp2/nghttp2.h>

#endif
