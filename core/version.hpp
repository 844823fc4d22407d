// actorpipe's version, for code built against it. Written here only: CMakeLists.txt reads these
// three numbers for project(VERSION), so the package's version file (find_package(actorpipe 0.1))
// and `actorpipe --version` say the same.
#pragma once

#define ACTORPIPE_VERSION_MAJOR 0
#define ACTORPIPE_VERSION_MINOR 1
#define ACTORPIPE_VERSION_PATCH 0

#define ACTORPIPE_VERSION_TEXT_(x) #x
#define ACTORPIPE_VERSION_TEXT(x) ACTORPIPE_VERSION_TEXT_(x)
// "0.1.0"
#define ACTORPIPE_VERSION_STRING                                                                     \
  ACTORPIPE_VERSION_TEXT(ACTORPIPE_VERSION_MAJOR) "." ACTORPIPE_VERSION_TEXT(ACTORPIPE_VERSION_MINOR) "." \
      ACTORPIPE_VERSION_TEXT(ACTORPIPE_VERSION_PATCH)
// One number for #if: major x 10000 + minor x 100 + patch (0.1.0 is 100).
#define ACTORPIPE_VERSION (ACTORPIPE_VERSION_MAJOR * 10000 + ACTORPIPE_VERSION_MINOR * 100 + ACTORPIPE_VERSION_PATCH)
