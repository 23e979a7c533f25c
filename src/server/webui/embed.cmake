# Writes OUT, a C++ file holding the bytes of IN as mnemo::server::kWebIndex (the web page at /).
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n_hex)
math(EXPR n "${n_hex} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUT} "// Generated from src/server/webui/index.html by embed.cmake: do not edit.\n"
  "#include <cstddef>\nnamespace mnemo::server {\n"
  "extern const unsigned char kWebIndex[] = {${bytes}};\n"
  "extern const size_t kWebIndexSize = ${n};\n}  // namespace mnemo::server\n")
