# Third-party packages, all from Debian. CAF ships no CMake config: imported targets made here.
find_package(Threads REQUIRED)

find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
add_library(caf::core UNKNOWN IMPORTED)
set_target_properties(caf::core PROPERTIES IMPORTED_LOCATION ${CAF_CORE_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${CAF_INCLUDE_DIR}
  INTERFACE_LINK_LIBRARIES Threads::Threads)
add_library(caf::io UNKNOWN IMPORTED)
set_target_properties(caf::io PROPERTIES IMPORTED_LOCATION ${CAF_IO_LIBRARY}
  INTERFACE_LINK_LIBRARIES caf::core)

find_package(Boost 1.74 REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(doctest REQUIRED)
find_package(xxHash QUIET)
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(XXHASH_LIBRARY xxhash REQUIRED)
add_library(kiln_xxhash INTERFACE)
target_include_directories(kiln_xxhash INTERFACE ${XXHASH_INCLUDE_DIR})
target_link_libraries(kiln_xxhash INTERFACE ${XXHASH_LIBRARY})

find_path(TOMLPP_INCLUDE_DIR toml++/toml.h REQUIRED)
add_library(kiln_tomlpp INTERFACE)
target_include_directories(kiln_tomlpp INTERFACE ${TOMLPP_INCLUDE_DIR})
find_library(TOMLPP_LIBRARY tomlplusplus)
if(TOMLPP_LIBRARY)
  target_link_libraries(kiln_tomlpp INTERFACE ${TOMLPP_LIBRARY})
  target_compile_definitions(kiln_tomlpp INTERFACE TOML_HEADER_ONLY=0)
endif()

find_package(SQLite3 REQUIRED)
find_package(msgpack 4 CONFIG REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)

# libpq (libpq-dev): the PostgreSQL store for nodes that share one.
find_path(PQ_INCLUDE_DIR libpq-fe.h PATH_SUFFIXES postgresql REQUIRED)
find_library(PQ_LIBRARY pq REQUIRED)
add_library(kiln_pq INTERFACE)
target_include_directories(kiln_pq INTERFACE ${PQ_INCLUDE_DIR})
target_link_libraries(kiln_pq INTERFACE ${PQ_LIBRARY})

# tcmalloc (libtcmalloc-minimal4) as the kiln binary's allocator when present: the actors
# allocate a mailbox element per message and the engines a block table per sequence, and
# tcmalloc takes 3-6% off the simulator's CPU (BENCHMARKS.md, "an allocator").
# Without the library kiln links and runs on glibc's malloc.
option(KILN_TCMALLOC "link the kiln binary with tcmalloc when the library is found" ON)
set(KILN_TCMALLOC_LIBRARY "")
if(KILN_TCMALLOC)
  find_library(KILN_TCMALLOC_LIBRARY_PATH NAMES tcmalloc_minimal libtcmalloc_minimal.so.4)
  if(KILN_TCMALLOC_LIBRARY_PATH)
    set(KILN_TCMALLOC_LIBRARY ${KILN_TCMALLOC_LIBRARY_PATH})
  endif()
endif()
if(KILN_TCMALLOC_LIBRARY)
  message(STATUS "kiln: allocator tcmalloc (${KILN_TCMALLOC_LIBRARY})")
else()
  message(STATUS "kiln: allocator glibc malloc")
endif()
