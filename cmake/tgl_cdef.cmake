# tgl_cdef.cmake — turns C headers into the Lua module tgl.cdef, the LuaJIT
# FFI declarations of the engine (include/tgl.h) and of the host's exports
# (host/tgl_host.h), so that the headers are the only hand-written copy.
#
# Run at build time as a script:
#   cmake -DCC=<C compiler> -DHEADERS="<field>=<header>;..." -DOUT=<cdef.lua>
#         -DWORK=<scratch dir> [-DSOURCE_DIR=<dir headers are named from>]
#         -P tgl_cdef.cmake
#
# For each header, the module gets a field holding the header's
# declarations as the C preprocessor leaves them: system #includes dropped
# (LuaJIT knows the standard types), every predefined macro undefined
# (-undef: no __GNUC__, so attribute blocks and visibility macros vanish),
# macros expanded (array sizes such as TGL_MAX_DIMS become numbers) and
# comments gone.  The field `defines` holds the headers' object-like
# TGL_* macros as Lua values: integer constant expressions (evaluated),
# floating literals and string literals.  A TGL_* macro with any other
# kind of value stops the build, so no constant goes missing silently.
cmake_minimum_required(VERSION 3.20)

foreach(v CC HEADERS OUT WORK)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "tgl_cdef.cmake: -D${v}=... is required")
  endif()
endforeach()
file(MAKE_DIRECTORY "${WORK}")

# Runs the preprocessor over file with extra arguments; result in var.
function(tgl_cpp var file)
  execute_process(COMMAND ${CC} -E -P -undef -x c ${ARGN} "${file}"
                  OUTPUT_VARIABLE text ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tgl_cdef.cmake: the C preprocessor failed on ${file}:\n${err}")
  endif()
  set(${var} "${text}" PARENT_SCOPE)
endfunction()

# A Lua long string holding text, at a level the text does not close.
function(tgl_lua_long var text)
  set(eq "=")
  while(text MATCHES "]${eq}]")
    string(APPEND eq "=")
  endwhile()
  set(${var} "[${eq}[\n${text}]${eq}]" PARENT_SCOPE)
endfunction()

set(fields "")
set(shown_headers "")
set(define_names "")
set(probe_includes "")
set(probe_flags "")
foreach(entry IN LISTS HEADERS)
  if(NOT entry MATCHES "^([A-Za-z_][A-Za-z0-9_]*)=(.+)$")
    message(FATAL_ERROR "tgl_cdef.cmake: HEADERS entry '${entry}' is not <field>=<header>")
  endif()
  set(field "${CMAKE_MATCH_1}")
  set(header "${CMAKE_MATCH_2}")
  get_filename_component(header_dir "${header}" DIRECTORY)
  get_filename_component(header_name "${header}" NAME_WE)
  set(shown "${header}")
  if(DEFINED SOURCE_DIR)
    file(RELATIVE_PATH shown "${SOURCE_DIR}" "${header}")
  endif()
  list(APPEND shown_headers "${shown}")

  # The header without its system includes (quoted includes of tgl's own
  # headers stay, found next to it).
  file(READ "${header}" src)
  string(REGEX REPLACE "(^|\n)[ \t]*#[ \t]*include[ \t]*<[^\n]*" "\\1" src "${src}")
  set(stripped "${WORK}/${header_name}.h")
  file(WRITE "${stripped}" "${src}")
  string(APPEND probe_includes "#include \"${stripped}\"\n")
  list(APPEND probe_flags "-I${header_dir}")

  tgl_cpp(decls "${stripped}" "-I${header_dir}")
  # Tidy what the preprocessor leaves: blank lines, and the space where a
  # visibility macro stood before each prototype.
  string(REGEX REPLACE "\n[ \t]*\n" "\n" decls "\n${decls}")
  string(REGEX REPLACE "\n ([^ ])" "\n\\1" decls "${decls}")
  string(REGEX REPLACE "^\n" "" decls "${decls}")
  tgl_lua_long(decls_lua "${decls}")
  string(APPEND fields "  -- ${shown}\n  ${field} = ${decls_lua},\n")

  # Its object-like TGL_* macros (function-like ones have "(" after the name).
  tgl_cpp(macros "${stripped}" "-I${header_dir}" -dM)
  string(REGEX MATCHALL "#define TGL_[A-Za-z0-9_]+ [^\n]*[^ \n]" defs "${macros}")
  foreach(d IN LISTS defs)
    string(REGEX REPLACE "^#define (TGL_[A-Za-z0-9_]+) .*" "\\1" name "${d}")
    list(APPEND define_names "${name}")
  endforeach()
endforeach()

# Each macro's value fully expanded: one probe line per macro.
list(REMOVE_DUPLICATES define_names)
list(SORT define_names)
set(probe "${probe_includes}")
set(i 0)
foreach(name IN LISTS define_names)
  string(APPEND probe "tgl_cdef_probe_${i} ${name}\n")
  math(EXPR i "${i} + 1")
endforeach()
file(WRITE "${WORK}/probe.c" "${probe}")
tgl_cpp(expanded "${WORK}/probe.c" ${probe_flags})

set(defines "")
set(i 0)
foreach(name IN LISTS define_names)
  if(NOT expanded MATCHES "tgl_cdef_probe_${i} ([^\n]*)")
    message(FATAL_ERROR "tgl_cdef.cmake: no expansion of ${name}")
  endif()
  string(STRIP "${CMAKE_MATCH_1}" value)
  math(EXPR i "${i} + 1")
  if(value MATCHES "^\"([^\"\\\\]|\\\\.)*\"$")
    set(lua "${value}")                           # a string literal
  elseif(value MATCHES "^[-+]?([0-9]+\\.[0-9]*|\\.[0-9]+|[0-9]+)([eE][-+]?[0-9]+)?[fFlL]?$"
         AND value MATCHES "[.eE]" AND NOT value MATCHES "^[-+]?0[xX]")
    string(REGEX REPLACE "[fFlL]$" "" lua "${value}")   # a floating literal
  elseif(value MATCHES "^[-+*/%<>&|^~()0-9a-fA-FxXuUlL \t]+$")
    # an integer constant expression: drop the suffixes, let math evaluate
    string(REGEX REPLACE "(0[xX][0-9a-fA-F]+|[0-9]+)[uUlL]+" "\\1" expr "${value}")
    math(EXPR lua "${expr}")
  else()
    message(FATAL_ERROR "tgl_cdef.cmake: #define ${name} ${value}: the FFI generator "
            "turns only integer constant expressions, floating literals and string "
            "literals into Lua values (tgl.cdef.defines)")
  endif()
  string(APPEND defines "    ${name} = ${lua},\n")
endforeach()

list(JOIN shown_headers " and " shown_headers)
set(lua_text "-- tgl.cdef — generated at build time by cmake/tgl_cdef.cmake from
-- ${shown_headers}.
-- Do not edit: change the headers.  tgl.core hands these to ffi.cdef.
return {
${fields}  -- object-like TGL_* macros of those headers
  defines = {
${defines}  },
}
")
file(WRITE "${OUT}" "${lua_text}")
