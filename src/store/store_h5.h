/* What the HDF5 writer and reader share (internal). */
#ifndef SDDAQ_STORE_H5_H
#define SDDAQ_STORE_H5_H

#include <fcntl.h>
#include <pthread.h>

#include "store_internal.h"

/* Held around every HDF5 call: Debian's serial libhdf5 is not thread-safe. */
extern pthread_mutex_t store_h5_lock;

/* Turn off HDF5's automatic error printing (once). */
void store_h5_init(void);

#endif
