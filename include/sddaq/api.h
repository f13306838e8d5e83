/* Export macro for the public API: the library builds with hidden visibility. */
#ifndef SDDAQ_API_H
#define SDDAQ_API_H

#define SDD_API __attribute__((visibility("default")))

#endif
