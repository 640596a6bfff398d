/* The PostgreSQL v3 message header, shared by the compiled framing walk (_frames.c) and the
 * compiled one-call tracking (_track.c): a type byte, then an int32 length (big-endian) that counts
 * itself and the payload. */
#ifndef FAILOVER_HARNESS_WIRE_H
#define FAILOVER_HARNESS_WIRE_H

#include <stdint.h>

/* The length field at `p` (the 4 bytes after the type byte). */
static inline int32_t
wire_length(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

/* The end offset of the complete message at p[pos:n], or -1: fewer than 5 bytes left, a length
 * below 4 (the caller names that error) or an incomplete message. */
static inline Py_ssize_t
wire_next(const unsigned char *p, Py_ssize_t n, Py_ssize_t pos)
{
    if (n - pos < 5)
        return -1;
    int32_t length = wire_length(p + pos + 1);
    if (length < 4)
        return -1;
    Py_ssize_t end = pos + 1 + (Py_ssize_t)length;
    return end > n ? -1 : end;
}

#endif
