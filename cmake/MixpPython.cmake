# MIXP_PYTHON=AUTO|ON|OFF: the `mixp` Python package (python/, docs/python.md). AUTO builds it
# when pybind11 and the Python development headers are found; ON fails the configure without them.
# The build tree holds an importable package in ${PROJECT_BINARY_DIR}/python/mixp (the extension
# `_mixp` next to copies of python/mixp/*.py), which the `python` test (ctest -L python) puts on
# PYTHONPATH; `cmake --install` puts the same package in the prefix's site-packages.
set(MIXP_PYTHON AUTO CACHE STRING "Build the Python module: AUTO (when pybind11 and Python headers are found), ON or OFF")
set_property(CACHE MIXP_PYTHON PROPERTY STRINGS AUTO ON OFF)

# The interpreter: one that has NumPy (the module's arrays are NumPy's). A python3 earlier on PATH
# without NumPy (a pyenv shim, a bare venv) would build a module nobody can test, so the first
# python3 on PATH that imports numpy wins, then /usr/bin/python3; Python3_EXECUTABLE overrides.
function(mixp_pick_python out)
  if(Python3_EXECUTABLE)
    set(${out} "${Python3_EXECUTABLE}" PARENT_SCOPE)
    return()
  endif()
  string(REPLACE ":" ";" dirs "$ENV{PATH}")
  list(APPEND dirs /usr/bin)
  foreach(d IN LISTS dirs)
    if(EXISTS "${d}/python3")
      execute_process(COMMAND "${d}/python3" -c "import numpy" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
      if(rc EQUAL 0)
        set(${out} "${d}/python3" PARENT_SCOPE)
        return()
      endif()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

set(MIXP_PYTHON_BUILT OFF)
# Under MIXP_SANITIZE the extension would carry the ASan runtime, which a plain python3 cannot
# load ("ASan runtime does not come first"): the sanitizer build skips the module.
if(MIXP_SANITIZE AND NOT MIXP_PYTHON STREQUAL "OFF")
  message(STATUS "mixp: Python module not built under MIXP_SANITIZE (python3 cannot load the ASan runtime)")
elseif(NOT MIXP_PYTHON STREQUAL "OFF")
  mixp_pick_python(mixp_python_exe)
  if(mixp_python_exe)
    set(Python3_EXECUTABLE "${mixp_python_exe}" CACHE FILEPATH "Python interpreter for the mixp module")
  endif()
  if(MIXP_PYTHON STREQUAL "ON")
    set(mixp_py_req REQUIRED)
  else()
    set(mixp_py_req QUIET)
  endif()
  find_package(Python3 COMPONENTS Interpreter Development.Module ${mixp_py_req})
  if(Python3_FOUND)
    set(PYBIND11_FINDPYTHON ON)
    find_package(pybind11 CONFIG ${mixp_py_req})
  endif()
  if(Python3_FOUND AND pybind11_FOUND)
    set(MIXP_PYTHON_BUILT ON)
  else()
    message(STATUS "mixp: Python module not built (needs pybind11-dev and python3-dev; MIXP_PYTHON=${MIXP_PYTHON})")
  endif()
endif()

if(MIXP_PYTHON_BUILT)
  set(MIXP_PYTHON_PKG_DIR "${PROJECT_BINARY_DIR}/python/mixp")
  file(GLOB mixp_py_srcs CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/python/src/*.cpp")
  pybind11_add_module(mixp_python MODULE NO_EXTRAS ${mixp_py_srcs})  # NO_EXTRAS: no LTO (a slow serial link)
  set_target_properties(mixp_python PROPERTIES OUTPUT_NAME _mixp
    LIBRARY_OUTPUT_DIRECTORY "${MIXP_PYTHON_PKG_DIR}")
  target_include_directories(mixp_python PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/python/src)
  target_link_libraries(mixp_python PRIVATE mixp OpenMP::OpenMP_CXX)
  mixp_warnings(mixp_python)

  # The pure-Python files, copied next to the extension at build time.
  file(GLOB mixp_py_files CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/python/mixp/*.py")
  set(mixp_py_copies)
  foreach(f IN LISTS mixp_py_files)
    get_filename_component(n ${f} NAME)
    add_custom_command(OUTPUT "${MIXP_PYTHON_PKG_DIR}/${n}"
      COMMAND ${CMAKE_COMMAND} -E copy_if_different "${f}" "${MIXP_PYTHON_PKG_DIR}/${n}"
      DEPENDS "${f}" VERBATIM)
    list(APPEND mixp_py_copies "${MIXP_PYTHON_PKG_DIR}/${n}")
  endforeach()
  add_custom_target(mixp_python_files ALL DEPENDS ${mixp_py_copies})
  add_dependencies(mixp_python mixp_python_files)

  # Installed into <prefix>/<libdir>/python3.X/site-packages/mixp, finding libmixp through a
  # relative RPATH; the build tree's copy finds it through the build RPATH CMake sets.
  set(MIXP_PYTHON_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/python${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}/site-packages"
      CACHE STRING "Where `cmake --install` puts the mixp Python package, relative to the prefix")
  file(RELATIVE_PATH mixp_py_rpath "/p/${MIXP_PYTHON_INSTALL_DIR}/mixp" "/p/${CMAKE_INSTALL_LIBDIR}")
  # $ORIGIN first in both: python/setup.py ships libmixp.so.0 next to the extension.
  set_target_properties(mixp_python PROPERTIES INSTALL_RPATH "$ORIGIN;$ORIGIN/${mixp_py_rpath}"
    BUILD_RPATH "$ORIGIN")
  install(TARGETS mixp_python LIBRARY DESTINATION "${MIXP_PYTHON_INSTALL_DIR}/mixp")
  install(FILES ${mixp_py_files} DESTINATION "${MIXP_PYTHON_INSTALL_DIR}/mixp")
endif()

# The pytest suite (python/tests) as one CTest test, label `python`. Without the module it still
# runs, printing why it skipped (exit 0).
if(MIXP_BUILD_TESTS)
  if(MIXP_PYTHON_BUILT)
    add_test(NAME python COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider
             "${PROJECT_SOURCE_DIR}/python/tests")
    set_tests_properties(python PROPERTIES LABELS python TIMEOUT 300
      ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python;MIXP_CLI=$<TARGET_FILE:mixp_cli>;PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=2")
  else()
    add_test(NAME python COMMAND ${CMAKE_COMMAND} -E echo
             "SKIPPED: the mixp Python module was not built (MIXP_PYTHON=${MIXP_PYTHON}, MIXP_SANITIZE=${MIXP_SANITIZE}; needs pybind11-dev and python3-dev, and no sanitizer)")
    set_tests_properties(python PROPERTIES LABELS python)
  endif()
endif()
