/* ast.h: the syntax tree of a .tg file, as the parser builds it.
 *
 * The tree is deliberately thin: names stay strings, numbers stay doubles,
 * and every node keeps its location.  All meaning (scopes, shapes, block
 * expansion) is given by elaborate.c, which turns the tree into IR. */
#ifndef TG_AST_H
#define TG_AST_H

#include "ir.h"

typedef struct tg_expr tg_expr;
typedef struct tg_stmt tg_stmt;

typedef struct tg_expr_list {
  tg_expr **items;
  int n, cap;
} tg_expr_list;

/* One component of a dotted path: `h[i]` is {name "h", index i}. */
typedef struct tg_seg {
  const char *name;
  tg_expr *index; /* NULL when not indexed */
  tg_loc loc;
} tg_seg;

typedef struct tg_path {
  tg_seg *segs;
  int n, cap;
} tg_path;

typedef enum tg_expr_kind {
  TG_E_NUM,    /* num */
  TG_E_NAME,   /* path: a variable, parameter or constant, e.g. wte.weight */
  TG_E_CALL,   /* path(args): the last segment names the block or builtin,
                  the ones before it the parameter scope, e.g. h[i].layer(x) */
  TG_E_UNARY,  /* op lhs; op is '-' */
  TG_E_BINARY, /* lhs op rhs; op is a character or a TG_TOK_* below */
  TG_E_LIST,   /* [args] */
} tg_expr_kind;

/* Two-character operators, numbered above any single character. */
enum { TG_TOK_EQ = 256, TG_TOK_NE, TG_TOK_LE, TG_TOK_GE };

struct tg_expr {
  tg_expr_kind kind;
  tg_loc loc; /* of the operator for unary/binary, else of the start */
  double num;
  tg_path path;
  int op;
  tg_expr *lhs, *rhs;
  tg_expr_list args;
};

/* A dim in a block argument's type pattern: an expression, or a name that
 * binds to whatever size the argument has there. */
typedef struct tg_type_pat {
  const char *dtype; /* the grammar requires one: f32[...] */
  tg_loc dtype_loc;
  bool any_prefix;   /* leading `...`: any number of leading dims */
  tg_expr_list dims;
} tg_type_pat;

typedef struct tg_arg {
  const char *name;
  tg_loc loc;
  tg_type_pat *type; /* NULL: untyped (a tensor of any type, or a number) */
} tg_arg;

typedef struct tg_stmt_list {
  tg_stmt **items;
  int n, cap;
} tg_stmt_list;

typedef enum tg_stmt_kind {
  TG_S_ASSIGN, /* names... = value */
  TG_S_RETURN, /* return value */
  TG_S_OUTPUT, /* output name = value */
  TG_S_FOR,    /* for name in lo .. hi { body } */
  TG_S_PARAM,  /* param path : dtype[shape] = init */
  TG_S_INPUT,  /* input name : dtype[shape] */
  TG_S_CONFIG, /* config { name = value ... }: body holds TG_S_ASSIGNs */
  TG_S_IMPORT, /* import "file" */
  TG_S_BLOCK,  /* block name(args) { body } */
  TG_S_ASSERT, /* assert value [, "message"]: a compile-time check */
  TG_S_MESH,   /* mesh name = value: the tensor axis of the device mesh and its degree */
} tg_stmt_kind;

struct tg_stmt {
  tg_stmt_kind kind;
  tg_loc loc;
  const char **names; /* assign targets, output/for/input/block name */
  tg_loc *name_locs;
  int n_names;
  tg_path path;       /* param name */
  tg_expr *value;     /* assign/return/output value; for: lo; param: init */
  tg_expr *hi;        /* for: hi */
  const char *dtype;  /* param/input; NULL means f32 for params */
  tg_loc dtype_loc;
  tg_expr_list shape; /* param/input */
  tg_stmt_list body;  /* for/config/block */
  tg_arg *args;       /* block */
  int n_args;
  const char *file;   /* import: the file named; assert: its message */
  const char *shard;  /* param: "shard NAME": how it splits over the mesh's tensor axis; NULL: replicated */
  tg_loc shard_loc;
  tg_expr *shard_groups; /* param: "shard NAME(groups)", or NULL */
};

/* What one file parses to. */
typedef struct tg_ast {
  const tg_source *src;
  tg_stmt_list items;
} tg_ast;

/* Parses src; reports the first syntax error through ctx and bails. */
tg_ast *tg_parse(tg_ctx *ctx, const tg_source *src);

/* Construction helpers for the parser. */
tg_expr *tg_expr_new(tg_arena *a, tg_expr_kind kind, tg_loc loc);
void tg_expr_list_push(tg_arena *a, tg_expr_list *l, tg_expr *e);
void tg_path_push(tg_arena *a, tg_path *p, tg_seg seg);
tg_stmt *tg_stmt_new(tg_arena *a, tg_stmt_kind kind, tg_loc loc);
void tg_stmt_list_push(tg_arena *a, tg_stmt_list *l, tg_stmt *s);
void tg_stmt_add_name(tg_arena *a, tg_stmt *s, const char *name, tg_loc loc);
void tg_stmt_add_arg(tg_arena *a, tg_stmt *s, tg_arg arg);

#endif
