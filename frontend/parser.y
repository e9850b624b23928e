/* parser.y: the grammar of the .tg language (docs/language.md).
 *
 * Statements need no separators: an expression cannot be followed directly
 * by a token that starts a statement, so `n_layer = 12  n_head = 12` reads
 * as two assignments.  The parser only builds the tree; elaborate.c gives
 * it meaning, which keeps the grammar small and its errors about syntax. */
%define api.pure full
%define api.prefix {tg_yy}
%define parse.error detailed
%locations
%param {void *scanner}
%parse-param {tg_parse_state *ps}

%code requires {
#include "parse_state.h"
}

%code {
#include "lexer.h"

#define LOC(l) ((tg_loc){ps->src->path, (l).first_line, (l).first_column})
#define A (ps->ctx->arena)

static void tg_yyerror(TG_YYLTYPE *loc, void *scanner, tg_parse_state *ps, const char *msg) {
  (void)scanner;
  if (ps->reported) return;
  ps->reported = true;
  if (strcmp(msg, "memory exhausted") == 0)
    msg = "nesting too deep for the parser";
  tg_report(ps->ctx, "error", LOC(*loc), "%s", msg);
}

static tg_expr *binary(tg_parse_state *ps, int op, tg_loc loc, tg_expr *l, tg_expr *r) {
  tg_expr *e = tg_expr_new(A, TG_E_BINARY, loc);
  e->op = op;
  e->lhs = l;
  e->rhs = r;
  return e;
}
}

%union {
  const char *str;
  double num;
  tg_expr *expr;
  tg_expr_list exprs;
  tg_path path;
  tg_stmt *stmt;
  tg_stmt_list stmts;
  tg_type_pat *pat;
  tg_arg arg;
}

%token <str> IDENT "identifier"
%token <num> NUMBER "number"
%token <str> STRING "string"
%token IMPORT "keyword 'import'" CONFIG "keyword 'config'" INPUT "keyword 'input'"
%token PARAM "keyword 'param'" BLOCK "keyword 'block'" FOR "keyword 'for'" IN "keyword 'in'"
%token RETURN "keyword 'return'" OUTPUT "keyword 'output'" ASSERT "keyword 'assert'"
%token SHARD "keyword 'shard'" MESH "keyword 'mesh'"
%token DOTDOT "'..'" ELLIPSIS "'...'" EQ "'=='" NE "'!='" LE "'<='" GE "'>='"

%nonassoc EQ NE '<' '>' LE GE
%left '+' '-'
%left '*' '/' '%' '@'
%precedence UMINUS

%type <expr> expr primary
%type <exprs> exprs opt_exprs
%type <path> path
%type <stmt> stmt assign names block_def config_block param_decl param_head input_decl opt_args args
%type <stmts> stmts config_entries
%type <pat> type_pat
%type <arg> arg
%type <str> opt_dtype

%%

file
  : stmts                 { ps->ast->items = $1; }
  ;

stmts
  : %empty                { $$ = (tg_stmt_list){0}; }
  | stmts stmt            { $$ = $1; if ($2) tg_stmt_list_push(A, &$$, $2); }
  ;

stmt
  : assign
  | IMPORT STRING         { $$ = tg_stmt_new(A, TG_S_IMPORT, LOC(@1)); $$->file = $2; }
  | config_block
  | block_def
  | param_decl
  | input_decl
  | RETURN expr           { $$ = tg_stmt_new(A, TG_S_RETURN, LOC(@1)); $$->value = $2; }
  | ASSERT expr           { $$ = tg_stmt_new(A, TG_S_ASSERT, LOC(@2)); $$->value = $2; }
  | ASSERT expr ',' STRING {
      $$ = tg_stmt_new(A, TG_S_ASSERT, LOC(@2));
      $$->value = $2;
      $$->file = $4;
    }
  | OUTPUT IDENT '=' expr {
      $$ = tg_stmt_new(A, TG_S_OUTPUT, LOC(@1));
      tg_stmt_add_name(A, $$, $2, LOC(@2));
      $$->value = $4;
    }
  | FOR IDENT IN expr DOTDOT expr '{' stmts '}' {
      $$ = tg_stmt_new(A, TG_S_FOR, LOC(@1));
      tg_stmt_add_name(A, $$, $2, LOC(@2));
      $$->value = $4;
      $$->hi = $6;
      $$->body = $8;
    }
  | MESH IDENT '=' expr   {
      $$ = tg_stmt_new(A, TG_S_MESH, LOC(@1));
      tg_stmt_add_name(A, $$, $2, LOC(@2));
      $$->value = $4;
    }
  | ';'                   { $$ = NULL; }
  ;

/* x = e, and q, k, v = split(...) */
assign
  : names '=' expr        { $$ = $1; $$->value = $3; }
  ;

names
  : IDENT                 { $$ = tg_stmt_new(A, TG_S_ASSIGN, LOC(@1)); tg_stmt_add_name(A, $$, $1, LOC(@1)); }
  | names ',' IDENT       { $$ = $1; tg_stmt_add_name(A, $$, $3, LOC(@3)); }
  ;

config_block
  : CONFIG '{' config_entries '}' { $$ = tg_stmt_new(A, TG_S_CONFIG, LOC(@1)); $$->body = $3; }
  ;

config_entries
  : %empty                { $$ = (tg_stmt_list){0}; }
  | config_entries IDENT '=' expr {
      $$ = $1;
      tg_stmt *s = tg_stmt_new(A, TG_S_ASSIGN, LOC(@2));
      tg_stmt_add_name(A, s, $2, LOC(@2));
      s->value = $4;
      tg_stmt_list_push(A, &$$, s);
    }
  | config_entries ';'    { $$ = $1; }
  ;

block_def
  : BLOCK IDENT '(' opt_args ')' '{' stmts '}' {
      $$ = $4; /* the statement that collected the arguments */
      $$->loc = LOC(@1);
      tg_stmt_add_name(A, $$, $2, LOC(@2));
      $$->body = $7;
    }
  ;

/* Arguments are collected straight into the block statement. */
opt_args
  : %empty                { $$ = tg_stmt_new(A, TG_S_BLOCK, LOC(@$)); }
  | args
  ;

args
  : arg                   { $$ = tg_stmt_new(A, TG_S_BLOCK, LOC(@1)); tg_stmt_add_arg(A, $$, $1); }
  | args ',' arg          { $$ = $1; tg_stmt_add_arg(A, $$, $3); }
  ;

arg
  : IDENT                 { $$ = (tg_arg){$1, LOC(@1), NULL}; }
  | IDENT ':' type_pat    { $$ = (tg_arg){$1, LOC(@1), $3}; }
  ;

type_pat
  : IDENT '[' opt_exprs ']' {
      $$ = tg_alloc(A, sizeof *$$);
      $$->dtype = $1;
      $$->dtype_loc = LOC(@1);
      $$->dims = $3;
    }
  | IDENT '[' ELLIPSIS ']' {
      $$ = tg_alloc(A, sizeof *$$);
      $$->dtype = $1;
      $$->dtype_loc = LOC(@1);
      $$->any_prefix = true;
    }
  | IDENT '[' ELLIPSIS ',' exprs ']' {
      $$ = tg_alloc(A, sizeof *$$);
      $$->dtype = $1;
      $$->dtype_loc = LOC(@1);
      $$->any_prefix = true;
      $$->dims = $5;
    }
  ;

param_decl
  : param_head
  | param_head SHARD IDENT {
      $$ = $1;
      $$->shard = $3;
      $$->shard_loc = LOC(@3);
    }
  | param_head SHARD IDENT '(' expr ')' {
      $$ = $1;
      $$->shard = $3;
      $$->shard_loc = LOC(@3);
      $$->shard_groups = $5;
    }
  ;

param_head
  : PARAM path ':' opt_dtype '[' opt_exprs ']' '=' expr {
      $$ = tg_stmt_new(A, TG_S_PARAM, LOC(@2));
      $$->path = $2;
      $$->dtype = $4;
      $$->dtype_loc = LOC(@4);
      $$->shape = $6;
      $$->value = $9;
    }
  ;

input_decl
  : INPUT IDENT ':' IDENT '[' opt_exprs ']' {
      $$ = tg_stmt_new(A, TG_S_INPUT, LOC(@2));
      tg_stmt_add_name(A, $$, $2, LOC(@2));
      $$->dtype = $4;
      $$->dtype_loc = LOC(@4);
      $$->shape = $6;
    }
  ;

opt_dtype
  : %empty                { $$ = NULL; }
  | IDENT
  ;

path
  : IDENT                 { $$ = (tg_path){0}; tg_path_push(A, &$$, (tg_seg){$1, NULL, LOC(@1)}); }
  | IDENT '[' expr ']'    { $$ = (tg_path){0}; tg_path_push(A, &$$, (tg_seg){$1, $3, LOC(@1)}); }
  | path '.' IDENT        { $$ = $1; tg_path_push(A, &$$, (tg_seg){$3, NULL, LOC(@3)}); }
  | path '.' IDENT '[' expr ']' { $$ = $1; tg_path_push(A, &$$, (tg_seg){$3, $5, LOC(@3)}); }
  ;

opt_exprs
  : %empty                { $$ = (tg_expr_list){0}; }
  | exprs
  ;

exprs
  : expr                  { $$ = (tg_expr_list){0}; tg_expr_list_push(A, &$$, $1); }
  | exprs ',' expr        { $$ = $1; tg_expr_list_push(A, &$$, $3); }
  ;

expr
  : primary
  | expr '+' expr         { $$ = binary(ps, '+', LOC(@2), $1, $3); }
  | expr '-' expr         { $$ = binary(ps, '-', LOC(@2), $1, $3); }
  | expr '*' expr         { $$ = binary(ps, '*', LOC(@2), $1, $3); }
  | expr '/' expr         { $$ = binary(ps, '/', LOC(@2), $1, $3); }
  | expr '%' expr         { $$ = binary(ps, '%', LOC(@2), $1, $3); }
  | expr '@' expr         { $$ = binary(ps, '@', LOC(@2), $1, $3); }
  | expr '<' expr         { $$ = binary(ps, '<', LOC(@2), $1, $3); }
  | expr '>' expr         { $$ = binary(ps, '>', LOC(@2), $1, $3); }
  | expr LE expr          { $$ = binary(ps, TG_TOK_LE, LOC(@2), $1, $3); }
  | expr GE expr          { $$ = binary(ps, TG_TOK_GE, LOC(@2), $1, $3); }
  | expr EQ expr          { $$ = binary(ps, TG_TOK_EQ, LOC(@2), $1, $3); }
  | expr NE expr          { $$ = binary(ps, TG_TOK_NE, LOC(@2), $1, $3); }
  | '-' expr %prec UMINUS {
      $$ = tg_expr_new(A, TG_E_UNARY, LOC(@1));
      $$->op = '-';
      $$->lhs = $2;
    }
  ;

primary
  : NUMBER                { $$ = tg_expr_new(A, TG_E_NUM, LOC(@1)); $$->num = $1; }
  | path                  { $$ = tg_expr_new(A, TG_E_NAME, LOC(@1)); $$->path = $1; }
  | path '(' opt_exprs ')' {
      $$ = tg_expr_new(A, TG_E_CALL, $1.segs[$1.n - 1].loc);
      $$->path = $1;
      $$->args = $3;
    }
  | '(' expr ')'          { $$ = $2; }
  | '[' opt_exprs ']'     { $$ = tg_expr_new(A, TG_E_LIST, LOC(@1)); $$->args = $2; }
  ;

%%

tg_ast *tg_parse(tg_ctx *ctx, const tg_source *src) {
  tg_parse_state ps = {.ctx = ctx, .src = src};
  ps.ast = tg_alloc(ctx->arena, sizeof *ps.ast);
  ps.ast->src = src;
  yyscan_t scanner;
  if (tg_yylex_init_extra(&ps, &scanner) != 0) {
    fprintf(stderr, "tg: out of memory\n");
    exit(1);
  }
  YY_BUFFER_STATE buf = tg_yy_scan_bytes(src->text, (int)src->len, scanner);
  int rc = tg_yyparse(scanner, &ps);
  tg_yy_delete_buffer(buf, scanner);
  tg_yylex_destroy(scanner);
  if (rc != 0) {
    if (!ps.reported) tg_report(ctx, "error", (tg_loc){src->path, 1, 1}, "could not parse");
    tg_bail(ctx);
  }
  return ps.ast;
}
