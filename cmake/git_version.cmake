# Writes the build's identity into generated/version.cpp: the checkout's commit
# at build time (`-dirty` when tracked files differ from it, "unknown" outside
# a git checkout). The opal_version target runs this at every build, and
# configure_file rewrites the file only when the text changed, so an unchanged
# commit recompiles nothing.
#   cmake -DSRC=<source dir> -DIN=<version.cpp.in> -DOUT=<version.cpp> -P git_version.cmake
execute_process(COMMAND git rev-parse --short HEAD WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE OPAL_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT OPAL_GIT_COMMIT)
  set(OPAL_GIT_COMMIT "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE changed OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(changed)
    string(APPEND OPAL_GIT_COMMIT "-dirty")
  endif()
endif()
configure_file(${IN} ${OUT} @ONLY)
