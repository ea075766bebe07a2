# Layering: each component library exposes only its own headers.
#
# Code includes headers by their path from the source root ("common/status.h",
# "clusterd/engine/engine.h"), but the source root itself is never an include
# directory: that would let any target include any component's headers without
# linking it. Instead each component library gets its own include root in the
# build tree, holding one symlink per header it owns:
#
#   <build>/include/clusterd_common/common/status.h -> <src>/common/status.h
#   <build>/include/clusterd_engine/clusterd/engine/engine.h -> <src>/clusterd/engine/engine.h
#
# That root is a PUBLIC include directory of the library, so a target sees a
# component's headers exactly when it links the component (directly or through
# a PUBLIC dependency). Links are per file, not per directory, because
# components nest: clusterd_recovery owns clusterd/recovery/*.h but not
# clusterd/recovery/coordinator/*.h (clusterd_coordinator, above the engine),
# so the pure decision engine cannot include what drives it.
# test/layering checks that a header reached without linking its library does
# not compile.
#
# clusterd_component_headers(<target> <dir>...): <target> owns the headers
# directly inside each <dir> (relative to the source root; subdirectories are
# listed separately, since they may belong to another component). New headers
# are picked up at the next build (CONFIGURE_DEPENDS).
function(clusterd_component_headers target)
  set(root ${CMAKE_BINARY_DIR}/include/${target})
  # Recreated on every configure so that a removed or moved header stops
  # being reachable.
  file(REMOVE_RECURSE ${root})
  foreach(dir ${ARGN})
    file(GLOB headers CONFIGURE_DEPENDS
      LIST_DIRECTORIES false
      RELATIVE ${PROJECT_SOURCE_DIR}/${dir}
      ${PROJECT_SOURCE_DIR}/${dir}/*.h)
    if(NOT headers)
      message(FATAL_ERROR "clusterd_component_headers(${target}): no headers in ${dir}")
    endif()
    file(MAKE_DIRECTORY ${root}/${dir})
    foreach(h ${headers})
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${dir}/${h} ${root}/${dir}/${h} SYMBOLIC)
    endforeach()
  endforeach()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    target_include_directories(${target} INTERFACE ${root})  # headers only (test/support/fakes)
  else()
    target_include_directories(${target} PUBLIC ${root})
  endif()
endfunction()
