//! Recursive descent over the token list, one function per precedence level:
//!
//! ```text
//! or       := and (OR and)*
//! and      := not (AND not)*
//! not      := NOT not | cmp
//! cmp      := sum [ (= | <> | < | <= | > | >=) sum
//!                 | [NOT] BETWEEN sum AND sum
//!                 | [NOT] IN '(' literal (',' literal)* ')'
//!                 | [NOT] LIKE string [ESCAPE string]
//!                 | IS [NOT] NULL ]
//! sum      := product ((+ | -) product)*
//! product  := unary ((* | /) unary)*
//! unary    := (+ | -) unary | primary
//! primary  := literal | identifier | '(' or ')'
//! ```
//!
//! nom cuts the tokens (see `lexer`); the grammar itself is plain functions so
//! every error can name the offending token and its column, and so recursion
//! can be counted against [`MAX_DEPTH`].

use super::ast::{ArithOp, CmpOp, Expr, Field, Kind, Literal};
use super::lexer::{tokenize, Kw, Tok, Token};
use super::like::{LikeError, LikePattern};
use super::{column, SelectorError, MAX_DEPTH};

/// A parsed sub-expression with what the checks above it need to know.
struct Node {
    expr: Expr,
    kind: Kind,
    /// Height of the expression tree; evaluation recurses this deep.
    height: usize,
    /// Byte offset where the expression starts, for type errors.
    start: usize,
}

struct Parser<'a> {
    input: &'a str,
    tokens: Vec<Token>,
    pos: usize,
    /// Current parser recursion through parentheses and unary operators.
    nesting: usize,
}

pub(super) fn parse(input: &str) -> Result<Expr, SelectorError> {
    let tokens = tokenize(input)?;
    if tokens.is_empty() {
        return Err(SelectorError::Empty);
    }
    let mut parser = Parser {
        input,
        tokens,
        pos: 0,
        nesting: 0,
    };
    let node = parser.or()?;
    if let Some(token) = parser.peek_token() {
        return Err(parser.unexpected(token, "AND, OR or end of selector"));
    }
    parser.expect_kind(&node, Kind::Bool)?;
    Ok(node.expr)
}

type Parsed = Result<Node, SelectorError>;

impl Parser<'_> {
    fn peek_token(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn peek(&self) -> Option<&Tok> {
        self.peek_token().map(|t| &t.tok)
    }

    fn at_kw(&self, kw: Kw) -> bool {
        self.peek() == Some(&Tok::Kw(kw))
    }

    /// Byte offset of the next token (or the end of input).
    fn offset(&self) -> usize {
        self.peek_token().map_or(self.input.len(), |t| t.start)
    }

    fn advance(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.pos).cloned();
        if token.is_some() {
            self.pos += 1;
        }
        token
    }

    fn eat(&mut self, tok: &Tok) -> bool {
        if self.peek() == Some(tok) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, tok: &Tok, expected: &'static str) -> Result<(), SelectorError> {
        if self.eat(tok) {
            Ok(())
        } else {
            Err(self.error_here(expected))
        }
    }

    /// The error for "the next token is not what the grammar needs here".
    fn error_here(&self, expected: &'static str) -> SelectorError {
        match self.peek_token() {
            Some(token) => self.unexpected(token, expected),
            None => SelectorError::UnexpectedEnd { expected },
        }
    }

    fn unexpected(&self, token: &Token, expected: &'static str) -> SelectorError {
        const SHOWN: usize = 40;
        let text = self.input.get(token.start..token.end).unwrap_or_default();
        let token_text = match text.char_indices().nth(SHOWN) {
            Some((cut, _)) => format!("{}...", &text[..cut]),
            None => text.to_owned(),
        };
        SelectorError::UnexpectedToken {
            token: token_text,
            column: column(self.input, token.start),
            expected,
        }
    }

    fn enter(&mut self) -> Result<(), SelectorError> {
        self.nesting += 1;
        if self.nesting > MAX_DEPTH {
            return Err(self.too_deep(self.offset()));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.nesting -= 1;
    }

    fn too_deep(&self, at: usize) -> SelectorError {
        SelectorError::TooDeep {
            column: column(self.input, at),
            max: MAX_DEPTH,
        }
    }

    /// Builds a node one level above its tallest child, refusing trees that
    /// evaluation could not walk within its depth budget.
    fn node(&self, expr: Expr, kind: Kind, child_height: usize, start: usize) -> Parsed {
        let height = child_height + 1;
        if height > MAX_DEPTH {
            return Err(self.too_deep(start));
        }
        Ok(Node {
            expr,
            kind,
            height,
            start,
        })
    }

    /// Rejects operands whose type is known at parse time to be wrong, e.g.
    /// `'a' AND b` or `TRUE + 1`. Properties (`Kind::Any`) pass; the message decides.
    fn expect_kind(&self, node: &Node, want: Kind) -> Result<(), SelectorError> {
        if node.kind == Kind::Any || node.kind == want {
            return Ok(());
        }
        Err(SelectorError::TypeMismatch {
            expected: match want {
                Kind::Bool => "a boolean expression",
                Kind::Num => "a numeric expression",
                Kind::Str | Kind::Any => "a string expression",
            },
            column: column(self.input, node.start),
        })
    }

    fn or(&mut self) -> Parsed {
        self.chain(Kw::Or, Self::and, Expr::Or)
    }

    fn and(&mut self) -> Parsed {
        self.chain(Kw::And, Self::not, Expr::And)
    }

    fn chain(
        &mut self,
        kw: Kw,
        operand: fn(&mut Self) -> Parsed,
        build: fn(Box<[Expr]>) -> Expr,
    ) -> Parsed {
        let first = operand(self)?;
        if !self.at_kw(kw) {
            return Ok(first);
        }
        self.expect_kind(&first, Kind::Bool)?;
        let start = first.start;
        let mut height = first.height;
        let mut items = vec![first.expr];
        while self.eat(&Tok::Kw(kw)) {
            let next = operand(self)?;
            self.expect_kind(&next, Kind::Bool)?;
            height = height.max(next.height);
            items.push(next.expr);
        }
        self.node(build(items.into_boxed_slice()), Kind::Bool, height, start)
    }

    fn not(&mut self) -> Parsed {
        if !self.at_kw(Kw::Not) {
            return self.cmp();
        }
        let start = self.offset();
        self.pos += 1;
        self.enter()?;
        let inner = self.not()?;
        self.leave();
        self.expect_kind(&inner, Kind::Bool)?;
        self.node(
            Expr::Not(Box::new(inner.expr)),
            Kind::Bool,
            inner.height,
            start,
        )
    }

    fn cmp(&mut self) -> Parsed {
        let left = self.sum()?;
        let op = match self.peek() {
            Some(Tok::Eq) => CmpOp::Eq,
            Some(Tok::Ne) => CmpOp::Ne,
            Some(Tok::Lt) => CmpOp::Lt,
            Some(Tok::Le) => CmpOp::Le,
            Some(Tok::Gt) => CmpOp::Gt,
            Some(Tok::Ge) => CmpOp::Ge,
            Some(Tok::Kw(Kw::Not | Kw::Between | Kw::In | Kw::Like | Kw::Is)) => {
                return self.predicate(left)
            }
            _ => return Ok(left),
        };
        self.pos += 1;
        let right = self.sum()?;
        if !matches!(op, CmpOp::Eq | CmpOp::Ne) {
            // JMS restricts strings and booleans to = and <>.
            self.expect_kind(&left, Kind::Num)?;
            self.expect_kind(&right, Kind::Num)?;
        }
        let height = left.height.max(right.height);
        let start = left.start;
        let expr = Expr::Cmp(op, Box::new(left.expr), Box::new(right.expr));
        self.node(expr, Kind::Bool, height, start)
    }

    /// BETWEEN, IN, LIKE and IS NULL, each optionally negated.
    fn predicate(&mut self, left: Node) -> Parsed {
        let start = left.start;
        if self.eat(&Tok::Kw(Kw::Is)) {
            let negated = self.eat(&Tok::Kw(Kw::Not));
            self.expect(&Tok::Kw(Kw::Null), "NULL")?;
            let expr = Expr::IsNull {
                value: Box::new(left.expr),
                negated,
            };
            return self.node(expr, Kind::Bool, left.height, start);
        }
        let negated = self.eat(&Tok::Kw(Kw::Not));
        let Some(Tok::Kw(kw @ (Kw::Between | Kw::In | Kw::Like))) = self.peek().cloned() else {
            return Err(self.error_here("BETWEEN, IN or LIKE"));
        };
        self.pos += 1;
        match kw {
            Kw::Between => {
                self.expect_kind(&left, Kind::Num)?;
                let low = self.sum()?;
                self.expect_kind(&low, Kind::Num)?;
                self.expect(&Tok::Kw(Kw::And), "AND")?;
                let high = self.sum()?;
                self.expect_kind(&high, Kind::Num)?;
                let height = left.height.max(low.height).max(high.height);
                let expr = Expr::Between {
                    value: Box::new(left.expr),
                    low: Box::new(low.expr),
                    high: Box::new(high.expr),
                    negated,
                };
                self.node(expr, Kind::Bool, height, start)
            }
            Kw::In => {
                if left.kind == Kind::Bool {
                    self.expect_kind(&left, Kind::Str)?;
                }
                let list = self.in_list()?;
                let expr = Expr::In {
                    value: Box::new(left.expr),
                    list,
                    negated,
                };
                self.node(expr, Kind::Bool, left.height, start)
            }
            _ => {
                self.expect_kind(&left, Kind::Str)?;
                let pattern = self.like_pattern()?;
                let expr = Expr::Like {
                    value: Box::new(left.expr),
                    pattern,
                    negated,
                };
                self.node(expr, Kind::Bool, left.height, start)
            }
        }
    }

    /// `('a', 'b')`. JMS allows string literals only; numbers are accepted
    /// too (`JMSPriority IN (1, 2)`) since they compare just as `=` would.
    fn in_list(&mut self) -> Result<Box<[Literal]>, SelectorError> {
        self.expect(&Tok::LParen, "'('")?;
        let mut list = Vec::new();
        loop {
            let minus = self.eat(&Tok::Minus);
            let literal = match (self.peek(), minus) {
                (Some(Tok::Str(s)), false) => Literal::Str(s.clone()),
                (Some(Tok::Int(i)), false) => Literal::Int(*i),
                (Some(Tok::Int(i)), true) => Literal::Int(i.wrapping_neg()),
                (Some(Tok::Float(f)), false) => Literal::Double(*f),
                (Some(Tok::Float(f)), true) => Literal::Double(-*f),
                _ => return Err(self.error_here("a string or number literal")),
            };
            self.pos += 1;
            list.push(literal);
            if self.eat(&Tok::RParen) {
                return Ok(list.into_boxed_slice());
            }
            self.expect(&Tok::Comma, "',' or ')'")?;
        }
    }

    fn like_pattern(&mut self) -> Result<LikePattern, SelectorError> {
        let pattern_at = self.offset();
        let Some(Tok::Str(pattern)) = self.peek().cloned() else {
            return Err(self.error_here("a pattern string"));
        };
        self.pos += 1;
        let escape = if self.eat(&Tok::Kw(Kw::Escape)) {
            let escape_at = self.offset();
            let Some(Tok::Str(escape)) = self.peek().cloned() else {
                return Err(self.error_here("an escape string"));
            };
            self.pos += 1;
            let mut chars = escape.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Some(c),
                _ => {
                    return Err(SelectorError::InvalidEscape {
                        column: column(self.input, escape_at),
                    })
                }
            }
        } else {
            None
        };
        LikePattern::compile(&pattern, escape).map_err(|e| SelectorError::InvalidPattern {
            column: column(self.input, pattern_at),
            reason: match e {
                LikeError::DanglingEscape => "pattern ends with its escape character",
            },
        })
    }

    fn sum(&mut self) -> Parsed {
        self.arithmetic(Self::product, |tok| match tok {
            Tok::Plus => Some(ArithOp::Add),
            Tok::Minus => Some(ArithOp::Sub),
            _ => None,
        })
    }

    fn product(&mut self) -> Parsed {
        self.arithmetic(Self::unary, |tok| match tok {
            Tok::Star => Some(ArithOp::Mul),
            Tok::Slash => Some(ArithOp::Div),
            _ => None,
        })
    }

    /// A left-associative run of binary arithmetic at one precedence level.
    fn arithmetic(
        &mut self,
        operand: fn(&mut Self) -> Parsed,
        operator: fn(&Tok) -> Option<ArithOp>,
    ) -> Parsed {
        let mut left = operand(self)?;
        while let Some(op) = self.peek().and_then(operator) {
            self.pos += 1;
            self.expect_kind(&left, Kind::Num)?;
            let right = operand(self)?;
            self.expect_kind(&right, Kind::Num)?;
            let height = left.height.max(right.height);
            let start = left.start;
            let expr = Expr::Arith(op, Box::new(left.expr), Box::new(right.expr));
            left = self.node(expr, Kind::Num, height, start)?;
        }
        Ok(left)
    }

    fn unary(&mut self) -> Parsed {
        let negate = match self.peek() {
            Some(Tok::Minus) => true,
            Some(Tok::Plus) => false,
            _ => return self.primary(),
        };
        let start = self.offset();
        self.pos += 1;
        self.enter()?;
        let inner = self.unary()?;
        self.leave();
        self.expect_kind(&inner, Kind::Num)?;
        if !negate {
            return Ok(Node { start, ..inner });
        }
        // Fold `-57` into a literal: the common case costs nothing per message.
        let expr = match inner.expr {
            Expr::Lit(Literal::Int(i)) if i != i64::MIN => Expr::Lit(Literal::Int(-i)),
            Expr::Lit(Literal::Double(d)) => Expr::Lit(Literal::Double(-d)),
            other => return self.node(Expr::Neg(Box::new(other)), Kind::Num, inner.height, start),
        };
        Ok(Node {
            expr,
            kind: Kind::Num,
            height: inner.height,
            start,
        })
    }

    fn primary(&mut self) -> Parsed {
        let Some(token) = self.advance() else {
            return Err(SelectorError::UnexpectedEnd {
                expected: "an expression",
            });
        };
        let start = token.start;
        let literal = |literal: Literal| Node {
            kind: literal.kind(),
            expr: Expr::Lit(literal),
            height: 1,
            start,
        };
        Ok(match token.tok {
            Tok::LParen => {
                self.enter()?;
                let inner = self.or()?;
                self.expect(&Tok::RParen, "')'")?;
                self.leave();
                Node { start, ..inner }
            }
            Tok::Str(s) => literal(Literal::Str(s)),
            Tok::Int(i) => literal(Literal::Int(i)),
            Tok::Float(f) => literal(Literal::Double(f)),
            Tok::Kw(Kw::True) => literal(Literal::Bool(true)),
            Tok::Kw(Kw::False) => literal(Literal::Bool(false)),
            Tok::Kw(Kw::Null) => literal(Literal::Null),
            Tok::Ident(name) => {
                let field = Field::resolve(&name);
                Node {
                    kind: field.kind(),
                    expr: Expr::Field(field),
                    height: 1,
                    start,
                }
            }
            _ => return Err(self.unexpected(&token, "an expression")),
        })
    }
}
