# install(SCRIPT) helper: copies a systemd unit written for the .deb's layout (/usr/bin,
# /usr/libexec) with the paths of the prefix it is installed to. Variables: UNIT (source file),
# DESTINATION (a directory under the prefix, relative), NAME (the installed file name).
set(_prefix "${CMAKE_INSTALL_PREFIX}")
file(READ "${UNIT}" _text)
if(NOT _prefix STREQUAL "/usr")
  string(REPLACE "=/usr/bin/" "=${_prefix}/bin/" _text "${_text}")
endif()
set(_dir "$ENV{DESTDIR}${_prefix}/${DESTINATION}")
file(MAKE_DIRECTORY "${_dir}")
file(WRITE "${_dir}/${NAME}" "${_text}")
message(STATUS "Installing: ${_dir}/${NAME}")
list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${_dir}/${NAME}")
