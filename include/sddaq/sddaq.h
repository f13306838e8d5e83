/* sddaq: the whole public API. */
#ifndef SDDAQ_SDDAQ_H
#define SDDAQ_SDDAQ_H

#include "sddaq/err.h"
#include "sddaq/log.h"
#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/hist.h"
#include "sddaq/bigbuf.h"
#include "sddaq/pool.h"
#include "sddaq/ring.h"
#include "sddaq/fabric.h"
#include "sddaq/rmem.h"
#include "sddaq/crc32c.h"
#include "sddaq/readout.h"
#include "sddaq/evb.h"
#include "sddaq/trigger.h"
#include "sddaq/store.h"
#include "sddaq/config.h"
#include "sddaq/metrics.h"
#include "sddaq/ctl.h"
#include "sddaq/run.h"

#endif
