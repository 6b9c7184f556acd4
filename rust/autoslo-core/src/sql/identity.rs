//! A query's class: what stays the same when the same query runs again with other constants.
//!
//! The class text is the statement's tokens (from [`sqlparser`]'s tokenizer, in the history's
//! dialect) with every literal and bind parameter replaced by `?`, a sign in front of a literal
//! dropped, a parenthesised list of literals collapsed to `(?)`, comments and whitespace removed,
//! unquoted words lower-cased and the tokens joined by single spaces. Quoted identifiers keep their
//! case and quotes. The class id is the first 64 bits of the SHA-256 of that text. Redshift's
//! `generic_query_hash`, where an export has it, names a class directly ([`class_of_hash`]).

use sha2::{Digest, Sha256};
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Token, Tokenizer};

use super::Dialect;
use crate::error::{AutoSloError, Result};

/// The placeholder that replaces a literal.
const LITERAL: &str = "?";

/// A query class: its id and normalised text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryClass {
    /// The first 64 bits of SHA-256 of [`QueryClass::text`] (or of the `generic_query_hash`).
    pub id: u64,
    /// The normalised text (empty for a class named by a `generic_query_hash` alone).
    pub text: String,
}

impl QueryClass {
    /// The class of `sql` in `dialect`. An error if the tokenizer cannot read it (an unterminated
    /// string or quoted identifier, say), or if it holds no token.
    pub fn of(sql: &str, dialect: Dialect) -> Result<Self> {
        let text = normalize(sql, dialect)?;
        Ok(Self { id: hash_text(&text), text })
    }
}

/// The class a `generic_query_hash` names (its own id space: never equal to a text's class but by
/// a 64-bit collision).
pub fn class_of_hash(generic_query_hash: &str) -> QueryClass {
    let key = format!("generic_query_hash:{}", generic_query_hash.trim());
    QueryClass { id: hash_text(&key), text: String::new() }
}

/// The first 64 bits of the SHA-256 of `text`.
pub fn hash_text(text: &str) -> u64 {
    let d = Sha256::digest(text.as_bytes());
    u64::from_be_bytes(d[..8].try_into().expect("a SHA-256 digest has 32 bytes"))
}

/// Whether `t` is a literal or a bind parameter.
fn is_literal(t: &Token) -> bool {
    matches!(
        t,
        Token::Number(..)
            | Token::SingleQuotedString(_)
            | Token::DoubleQuotedString(_)
            | Token::TripleSingleQuotedString(_)
            | Token::TripleDoubleQuotedString(_)
            | Token::DollarQuotedString(_)
            | Token::SingleQuotedByteStringLiteral(_)
            | Token::DoubleQuotedByteStringLiteral(_)
            | Token::TripleSingleQuotedByteStringLiteral(_)
            | Token::TripleDoubleQuotedByteStringLiteral(_)
            | Token::SingleQuotedRawStringLiteral(_)
            | Token::DoubleQuotedRawStringLiteral(_)
            | Token::TripleSingleQuotedRawStringLiteral(_)
            | Token::TripleDoubleQuotedRawStringLiteral(_)
            | Token::NationalStringLiteral(_)
            | Token::QuoteDelimitedStringLiteral(_)
            | Token::NationalQuoteDelimitedStringLiteral(_)
            | Token::EscapedStringLiteral(_)
            | Token::UnicodeStringLiteral(_)
            | Token::HexStringLiteral(_)
            | Token::Placeholder(_)
    )
}

/// Whether a `+` or `-` after `prev` is a binary operator (so that a literal after it keeps it).
fn ends_operand(prev: Option<&Token>) -> bool {
    match prev {
        Some(Token::Word(w)) => w.keyword == Keyword::NoKeyword || w.quote_style.is_some(),
        Some(Token::RParen | Token::RBracket) => true,
        Some(t) => is_literal(t),
        None => false,
    }
}

/// The normalised text of `sql` (see the module's documentation).
pub fn normalize(sql: &str, dialect: Dialect) -> Result<String> {
    let tokens = Tokenizer::new(dialect.parser(), sql).tokenize().map_err(|e| AutoSloError::Sql(e.to_string()))?;
    normalize_tokens(&tokens, sql.len())
}

/// One token of the normalised text.
enum Piece<'a> {
    /// A literal or bind parameter: `?`.
    Lit,
    /// An unquoted word, lower-cased when written.
    Lower(&'a str),
    Static(&'static str),
    Owned(String),
}

impl Piece<'_> {
    fn is(&self, s: &str) -> bool {
        match self {
            Piece::Lit => s == LITERAL,
            Piece::Lower(w) => *w == s,
            Piece::Static(x) => *x == s,
            Piece::Owned(x) => x == s,
        }
    }
}

/// The symbols most texts are made of, without an allocation each.
fn symbol(t: &Token) -> Option<&'static str> {
    Some(match t {
        Token::Comma => ",",
        Token::LParen => "(",
        Token::RParen => ")",
        Token::Period => ".",
        Token::Eq => "=",
        Token::Neq => "<>",
        Token::Lt => "<",
        Token::Gt => ">",
        Token::LtEq => "<=",
        Token::GtEq => ">=",
        Token::Plus => "+",
        Token::Minus => "-",
        Token::Mul => "*",
        Token::Div => "/",
        Token::SemiColon => ";",
        Token::StringConcat => "||",
        Token::DoubleColon => "::",
        _ => return None,
    })
}

/// The normalised text of a statement's tokens (`capacity`: a hint, the text's length).
pub(crate) fn normalize_tokens(all: &[Token], capacity: usize) -> Result<String> {
    let tokens: Vec<&Token> = all.iter().filter(|t| !matches!(t, Token::Whitespace(_) | Token::EOF)).collect();
    let mut pieces: Vec<Piece<'_>> = Vec::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        let prev = i.checked_sub(1).map(|k| tokens[k]);
        if matches!(t, Token::Minus | Token::Plus) && tokens.get(i + 1).is_some_and(|n| is_literal(n)) && !ends_operand(prev) {
            continue; // a literal's sign: the literal follows
        }
        pieces.push(if is_literal(t) {
            Piece::Lit
        } else if let Token::Word(w) = t {
            match w.quote_style {
                None => Piece::Lower(&w.value),
                Some(_) => Piece::Owned(t.to_string()),
            }
        } else {
            match symbol(t) {
                Some(s) => Piece::Static(s),
                None => Piece::Owned(t.to_string()),
            }
        });
    }
    while pieces.last().is_some_and(|p| p.is(";")) {
        pieces.pop();
    }
    if pieces.is_empty() {
        return Err(AutoSloError::Sql("no statement (empty, or only comments)".into()));
    }
    let mut out = String::with_capacity(capacity);
    let mut i = 0;
    while i < pieces.len() {
        // `( ? , ? , … )` becomes `( ? )`.
        if pieces[i].is("(") {
            let mut j = i + 1;
            let mut n = 0;
            while j + 1 < pieces.len() && matches!(pieces[j], Piece::Lit) && (pieces[j + 1].is(",") || pieces[j + 1].is(")")) {
                n += 1;
                if pieces[j + 1].is(")") {
                    break;
                }
                j += 2;
            }
            if n > 1 && j + 1 < pieces.len() && pieces[j + 1].is(")") {
                write_piece(&mut out, &Piece::Static("("));
                write_piece(&mut out, &Piece::Lit);
                write_piece(&mut out, &Piece::Static(")"));
                i = j + 2;
                continue;
            }
        }
        write_piece(&mut out, &pieces[i]);
        i += 1;
    }
    Ok(out)
}

fn write_piece(out: &mut String, p: &Piece<'_>) {
    if !out.is_empty() {
        out.push(' ');
    }
    match p {
        Piece::Lit => out.push_str(LITERAL),
        Piece::Lower(w) if w.is_ascii() => {
            let at = out.len();
            out.push_str(w);
            // Lower-casing ASCII bytes in place keeps the string UTF-8 (no unsafe needed).
            out[at..].make_ascii_lowercase();
        }
        Piece::Lower(w) => out.push_str(&w.to_lowercase()),
        Piece::Static(s) => out.push_str(s),
        Piece::Owned(s) => out.push_str(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(sql: &str) -> String {
        normalize(sql, Dialect::Redshift).unwrap()
    }

    #[test]
    fn literals_comments_case_and_space_fold() {
        let a = "SELECT  a, SUM(b) FROM Sales -- the big one\nWHERE d = '2024-01-01' AND x > 5 /* c */ GROUP BY a;";
        let b = "select a,sum(b) from sales where d='2025-12-31' and x>17 group by a";
        assert_eq!(n(a), n(b));
        assert_eq!(n(a), "select a , sum ( b ) from sales where d = ? and x > ? group by a");
        assert_eq!(QueryClass::of(a, Dialect::Redshift).unwrap().id, QueryClass::of(b, Dialect::Redshift).unwrap().id);
    }

    #[test]
    fn lists_signs_and_quoted_identifiers() {
        assert_eq!(n("select * from t where k in (1, 2, 3)"), n("select * from t where k in (7)"));
        assert_eq!(n("select * from t where x > -5"), n("select * from t where x > 5"));
        // A binary minus stays: `a - 1` is not `a 1`.
        assert_eq!(n("select a - 1 from t"), "select a - ? from t");
        assert_ne!(n("select a - 1 from t"), n("select a + 1 from t"));
        // Quoted identifiers keep their case; unquoted ones fold.
        assert_ne!(n("select \"A\" from t"), n("select \"a\" from t"));
        assert_eq!(n("select A from T"), n("select a from t"));
        // Different structure, different class.
        assert_ne!(n("select a from t"), n("select b from t"));
        // Any parenthesised list of literals collapses, a function's arguments too.
        assert_eq!(n("select f(1, 2) from t"), "select f ( ? ) from t");
    }

    #[test]
    fn bad_sql_is_an_error() {
        assert!(normalize("select 'unterminated", Dialect::Redshift).is_err());
        assert!(normalize("  -- only a comment\n", Dialect::Postgres).is_err());
        assert!(normalize(";", Dialect::Postgres).is_err());
    }

    #[test]
    fn hash_classes_are_their_own() {
        let a = class_of_hash(" abc ");
        assert_eq!(a, class_of_hash("abc"));
        assert_ne!(a.id, class_of_hash("abd").id);
        assert!(a.text.is_empty());
    }
}
