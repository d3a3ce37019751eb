# Profile-guided optimisation of the libraries the simulator's run spends its time in.
#
# cmake/pgo/ holds a profile (GCC's .gcda counts, one file per object) recorded by
# scripts/pgo_train.sh: seed_fleet run by a build instrumented with KILN_PGO_GENERATE=ON.
# Where it was made by the compiler that builds now, an optimised build (RelWithDebInfo or
# Release) compiles those libraries with it: branches laid out and functions inlined by how
# often they ran. Code the run never reached (the CPU executor, the tokenizer) is optimised
# as without a profile (partial training), and so is a function changed since the profile
# was made. Another compiler, another build type, or KILN_PGO=OFF builds as before.
option(KILN_PGO "optimise the simulator's hot libraries with the profile in cmake/pgo" ON)
option(KILN_PGO_GENERATE "instrument the hot libraries to record a profile (scripts/pgo_train.sh)" OFF)
set(KILN_PGO_DIR "${PROJECT_SOURCE_DIR}/cmake/pgo")
set(KILN_PGO_OUT "${CMAKE_BINARY_DIR}/pgo-profile" CACHE PATH "where an instrumented build writes its profile")

set(kiln_pgo_mode off)
set(kiln_pgo_compiler "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU" OR KILN_DEVICE_ONLY)
  # GCC's profile format only; the device machine's build is not the simulator's.
elseif(KILN_PGO_GENERATE)
  set(kiln_pgo_mode generate)
  file(WRITE "${CMAKE_BINARY_DIR}/pgo-compiler.txt" "${kiln_pgo_compiler}\n")  # for compiler.txt
elseif(KILN_PGO AND CMAKE_BUILD_TYPE MATCHES "^(RelWithDebInfo|Release)$" AND EXISTS "${KILN_PGO_DIR}/compiler.txt")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${KILN_PGO_DIR}/compiler.txt")
  file(STRINGS "${KILN_PGO_DIR}/compiler.txt" kiln_pgo_made_by LIMIT_COUNT 1)
  if(kiln_pgo_made_by STREQUAL kiln_pgo_compiler)
    set(kiln_pgo_mode use)
  else()
    message(STATUS "kiln: profile in cmake/pgo made by '${kiln_pgo_made_by}', not '${kiln_pgo_compiler}': not used")
  endif()
endif()
message(STATUS "kiln: profile-guided optimisation ${kiln_pgo_mode}")

# The profile's files are named for the objects' paths below the build folder
# ('engine#CMakeFiles#kiln_engine.dir#scheduler.cpp.gcda'). GCC looks for an object's counts
# under the name of its full path, so each build folder gets a copy named for where it is.
# ccache refuses -fprofile-prefix-path, the flag that would strip the folder instead, and
# looks for the counts at the object's own path below the profile folder: a second copy
# there lets it hash them, so the objects stay cacheable. The copies' digest is a definition
# on the libraries, so a new profile recompiles them.
if(kiln_pgo_mode STREQUAL "use")
  set(kiln_pgo_use_dir "${CMAKE_BINARY_DIR}/pgo-use")
  string(REPLACE "/" "#" kiln_pgo_folder "${CMAKE_BINARY_DIR}")
  file(REMOVE_RECURSE "${kiln_pgo_use_dir}")
  file(GLOB kiln_pgo_files "${KILN_PGO_DIR}/*.gcda")
  set(kiln_pgo_digests "")
  foreach(counts IN LISTS kiln_pgo_files)
    get_filename_component(name "${counts}" NAME)
    configure_file("${counts}" "${kiln_pgo_use_dir}/${kiln_pgo_folder}#${name}" COPYONLY)
    string(REPLACE "#" "/" object_path "${name}")
    configure_file("${counts}" "${kiln_pgo_use_dir}/${object_path}" COPYONLY)
    file(SHA256 "${counts}" digest)
    string(APPEND kiln_pgo_digests "${name} ${digest}\n")
  endforeach()
  string(SHA256 kiln_pgo_id "${kiln_pgo_digests}")
  string(SUBSTRING "${kiln_pgo_id}" 0 16 kiln_pgo_id)
  # -fprofile-partial-training goes through a spec file: ccache refuses it on the command
  # line, and passes -specs= through untouched.
  set(kiln_pgo_specs "${CMAKE_CURRENT_LIST_DIR}/pgo_partial_training.specs")
endif()

# The same source paths in every checkout, so the profile finds every function (see
# relative_source.sh); the build's own launcher (ccache) runs after it. The script's digest is
# a definition on the libraries: a change to it recompiles them (and re-runs CMake).
set(kiln_pgo_paths "${CMAKE_CURRENT_LIST_DIR}/relative_source.sh")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${kiln_pgo_paths}")
file(SHA256 "${kiln_pgo_paths}" kiln_pgo_paths_id)
string(SUBSTRING "${kiln_pgo_paths_id}" 0 16 kiln_pgo_paths_id)

function(kiln_profile_guided target)
  if(NOT kiln_pgo_mode STREQUAL "off")
    set_target_properties(${target} PROPERTIES CXX_COMPILER_LAUNCHER
                          "${kiln_pgo_paths};${PROJECT_SOURCE_DIR};${CMAKE_CXX_COMPILER_LAUNCHER}")
    target_compile_definitions(${target} PRIVATE KILN_PGO_PATHS=${kiln_pgo_paths_id})
  endif()
  if(kiln_pgo_mode STREQUAL "generate")
    target_compile_options(${target} PRIVATE -fprofile-generate=${KILN_PGO_OUT} -fprofile-update=atomic
                                             -fprofile-prefix-path=${CMAKE_BINARY_DIR})
    target_link_options(${target} INTERFACE -fprofile-generate)
  elseif(kiln_pgo_mode STREQUAL "use")
    target_compile_options(${target} PRIVATE -fprofile-use=${kiln_pgo_use_dir} -specs=${kiln_pgo_specs}
                                             -Wno-missing-profile -Wno-coverage-mismatch)
    target_compile_definitions(${target} PRIVATE KILN_PGO_PROFILE=${kiln_pgo_id})
  endif()
endfunction()
