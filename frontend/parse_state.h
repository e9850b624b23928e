/* parse_state.h: what the Flex scanner and the Bison parser share. */
#ifndef TG_PARSE_STATE_H
#define TG_PARSE_STATE_H

#include "ast.h"

typedef struct tg_parse_state {
  tg_ctx *ctx;
  const tg_source *src;
  tg_ast *ast;
  bool reported; /* an error was already reported (by the scanner) */
} tg_parse_state;

#endif
